"""Executing one run on a Celery worker: claim, guard, run, record, retry.

1. **Claim** — ``UPDATE jobrun SET status='running' … WHERE id = <run> AND task_id = <this
   message's id> AND attempt = <the message's attempt> AND status IN ('pending', 'queued',
   'retrying')``. Exactly one delivery of a message can match; every other copy (outbox
   re-publish, broker redelivery, a stale leader's publish, a forged or late message) matches
   nothing, is counted as a duplicate delivery and acknowledged without running anything.
2. **Overlap** — for jobs whose overlap policy is not ``allow``, the per-job execution lock
   (a :class:`~django_cluster_cron.locks.ClusterLock` named ``job:<id>``) decides: ``skip`` records
   the run ``skipped`` if another run of the job holds it; ``buffer_one`` lets one run wait for it
   and skips any further one.
3. **Run** — the job's registered task is called in-process with the job's args and kwargs while a
   heartbeat thread stamps ``heartbeat_at``; the leader declares a run whose heartbeat stops
   *lost* (see :meth:`django_cluster_cron.store.RunStore.recover_lost`).
4. **Record** — success with a short result and duration; or, on an exception, either the next
   attempt (same run, ``attempt + 1``, status ``retrying``, re-published with a countdown of
   exponential backoff with jitter) or, after the last attempt, ``failed`` with the error and
   traceback. Every final write is conditional on the run still being ``running`` at this attempt,
   so a late finish after the run was declared lost changes nothing.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import socket
import threading
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from . import signals
from .conf import app_settings
from .core.retry import retry_delay
from .locks import ClusterLock, LockUnavailable
from .models import JobDefinition, JobRun, RunStatus

logger = logging.getLogger("django_cluster_cron.worker")

RESULT_LIMIT = 1000
CLAIMABLE = (RunStatus.PENDING, RunStatus.QUEUED, RunStatus.RETRYING)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


_current_run: contextvars.ContextVar[JobRun | None] = contextvars.ContextVar(
    "cluster_cron_current_run", default=None
)


def current_run() -> JobRun | None:
    """The run being executed, inside a job's task body (``None`` elsewhere).

    Lets a task know which slot and attempt it runs for, e.g. to make its side effects
    idempotent per slot: ``run = current_run(); key = (run.job_id, run.scheduled_for)``.
    """
    return _current_run.get()


class SkipRun(Exception):
    """The overlap policy refused this run at execution time."""


def execute(task: Any, run_id: object, attempt: object) -> None:
    if not _is_id(run_id) or not _is_id(attempt):
        # Not a message the scheduler sends (a forged or corrupted one): acknowledge, ignore.
        logger.warning(
            "run.rejected_message task_id=%s args=%r: run id and attempt must be positive integers",
            task.request.id,
            [run_id, attempt],
        )
        return
    assert isinstance(run_id, int)
    assert isinstance(attempt, int)
    started = timezone.now()
    run = _with_fresh_connection(lambda: claim(run_id, task.request.id, attempt, started))
    if run is None:
        count_duplicate(run_id, task.request.id)
        return
    job = run.job
    problem = job.runtime_problem()
    if problem is not None:
        _finish(run, started, status=RunStatus.FAILED, error=f"invalid job definition: {problem}")
        logger.error("run.invalid_job run=%s job=%s: %s", run.pk, job.pk, problem)
        signals.send(signals.run_failed, run, error=None)
        return
    try:
        gate = _overlap_gate(job, run)
    except SkipRun as refusal:
        _skip(run, str(refusal))
        return
    except LockUnavailable as exc:
        _after_failure(task, run, started, exc, f"overlap lock unavailable: {exc}")
        return
    signals.send(signals.run_started, run)
    heartbeat = RunHeartbeat(run.pk, attempt)
    heartbeat.start()
    token = _current_run.set(run)
    try:
        result = task.app.tasks[job.task](*job.args, **job.kwargs)
    except Exception as exc:
        heartbeat.stop()
        record = functools.partial(_after_failure, task, run, started, exc, traceback.format_exc())
        _with_fresh_connection(record)
    else:
        heartbeat.stop()
        _with_fresh_connection(lambda: _succeed(run, started, result))
    finally:
        _current_run.reset(token)
        if gate is not None:
            gate.release()


T = TypeVar("T")


def _with_fresh_connection(action: Callable[[], T]) -> T:
    """Run a ledger write; if the connection broke (the body may have left it dead, or the
    server dropped it), reconnect and try once more — the writes are conditional, so a repeat
    is harmless — instead of leaving the run 'running' until it is declared lost."""
    try:
        return action()
    except (InterfaceError, OperationalError) as exc:
        logger.warning("run.db_reconnect error=%s", exc)
        connection.close()
        return action()


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


def claim(run_id: int, task_id: str, attempt: int, now: datetime) -> JobRun | None:
    claimed = JobRun.objects.filter(
        pk=run_id, task_id=task_id, attempt=attempt, status__in=CLAIMABLE
    ).update(
        status=RunStatus.RUNNING,
        started_at=now,
        heartbeat_at=now,
        worker=worker_name(),
        finished_at=None,
        duration=None,
        retry_at=None,
    )
    if not claimed:
        return None
    run: JobRun = JobRun.objects.select_related("job").get(pk=run_id)
    return run


def count_duplicate(run_id: object, task_id: object) -> None:
    """A delivery that lost the claim: log it and bump the cluster-wide counter."""
    logger.info("run.duplicate_delivery run=%s task_id=%s", run_id, task_id)
    try:
        from django_redis import get_redis_connection

        get_redis_connection(app_settings.REDIS_ALIAS).incr(
            f"{app_settings.KEY_PREFIX}:stats:duplicate_deliveries"
        )
    except Exception as exc:  # a statistic: never worth failing the message for
        logger.debug("stats.incr_failed error=%s", exc)


def duplicate_deliveries() -> int:
    from django_redis import get_redis_connection

    value = get_redis_connection(app_settings.REDIS_ALIAS).get(
        f"{app_settings.KEY_PREFIX}:stats:duplicate_deliveries"
    )
    return int(value or 0)


# -- overlap ---------------------------------------------------------------------------------


def _overlap_gate(job: JobDefinition, run: JobRun) -> ClusterLock | None:
    """Take the job's execution lock if its policy needs one; raise SkipRun if refused."""
    if job.overlap_policy == "allow":
        return None
    ttl = app_settings.RUN_LOST_AFTER.total_seconds()
    lock = ClusterLock(f"job:{job.pk}", ttl=ttl)
    if lock.acquire():
        return lock
    if job.overlap_policy == "skip":
        raise SkipRun("overlap policy 'skip': another run of this job is executing")
    waiter = ClusterLock(f"job:{job.pk}:waiting", ttl=ttl)
    if not waiter.acquire():
        raise SkipRun("overlap policy 'buffer_one': a run is already waiting")
    try:
        blocking = ClusterLock(f"job:{job.pk}", ttl=ttl, blocking=True)
        blocking.acquire()
        return blocking
    finally:
        waiter.release()


def _skip(run: JobRun, reason: str) -> None:
    now = timezone.now()
    JobRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING, attempt=run.attempt).update(
        status=RunStatus.SKIPPED, reason=reason[:255], finished_at=now
    )
    run.status, run.reason = RunStatus.SKIPPED, reason
    logger.info("run.skipped run=%s job=%s reason=%s", run.pk, run.job_id, reason)
    signals.send(signals.run_skipped, run, reason=reason)


# -- recording -------------------------------------------------------------------------------


def _finish(run: JobRun, started: datetime, **fields: Any) -> bool:
    finished = timezone.now()
    fields.setdefault("finished_at", finished)
    fields.setdefault("duration", finished - started)
    updated = JobRun.objects.filter(
        pk=run.pk, status=RunStatus.RUNNING, attempt=run.attempt
    ).update(**fields)
    for name, value in fields.items():
        setattr(run, name, value)
    return bool(updated)


def _succeed(run: JobRun, started: datetime, result: Any) -> None:
    if _finish(run, started, status=RunStatus.SUCCESS, result=_short(result), error=""):
        logger.info("run.succeeded run=%s job=%s attempt=%s", run.pk, run.job_id, run.attempt)
        signals.send(signals.run_succeeded, run, result=result)
    else:
        logger.warning("run.finished_late run=%s: it was declared lost meanwhile", run.pk)


def _after_failure(
    task: Any, run: JobRun, started: datetime, exc: BaseException, trace: str
) -> None:
    job = run.job
    error = f"{type(exc).__name__}: {exc}"[:10_000]
    if run.attempt <= job.max_retries:
        delay = retry_delay(run.attempt, base=job.retry_backoff, cap=job.retry_backoff_max)
        retry_at = timezone.now() + timedelta(seconds=delay)
        failed_attempt = run.attempt
        if not _finish(
            run,
            started,
            status=RunStatus.RETRYING,
            attempt=run.attempt + 1,
            retry_at=retry_at,
            # Until the retry message is confirmed sent, the outbox treats it as unsent.
            republish_at=retry_at,
            error=error,
            traceback=trace[:50_000],
        ):
            return
        logger.warning(
            "run.retrying run=%s job=%s failed_attempt=%s delay=%.2fs error=%s",
            run.pk,
            job.pk,
            failed_attempt,
            delay,
            error,
        )
        signals.send(signals.run_retrying, run, error=exc, delay=delay)
        _publish_retry(task, run, retry_at)
        return
    if _finish(run, started, status=RunStatus.FAILED, error=error, traceback=trace[:50_000]):
        logger.warning(
            "run.failed run=%s job=%s attempt=%s error=%s", run.pk, job.pk, run.attempt, error
        )
        signals.send(signals.run_failed, run, error=exc)


def _publish_retry(task: Any, run: JobRun, retry_at: datetime) -> None:
    from .dispatch import CeleryDispatcher, PublishFailed
    from .store import OutboxMessage, RunStore

    message = OutboxMessage.for_run(run, eta=retry_at)
    try:
        CeleryDispatcher(task.app).publish([message])
    except PublishFailed as exc:
        # The run stays 'retrying'; the leader's outbox sweep publishes it once overdue.
        logger.error("run.retry_publish_failed run=%s error=%s", run.pk, exc.cause)
        return
    RunStore().mark_published([message], now=timezone.now())


def _short(result: Any) -> str:
    text = repr(result)
    return text if len(text) <= RESULT_LIMIT else text[: RESULT_LIMIT - 1] + "…"


class RunHeartbeat:
    """Stamps ``heartbeat_at`` while the body runs, from a thread with its own DB connection."""

    def __init__(self, run_id: int, attempt: int) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.interval = app_settings.RUN_HEARTBEAT_INTERVAL
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"run-heartbeat-{run_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                try:
                    JobRun.objects.filter(
                        pk=self.run_id, status=RunStatus.RUNNING, attempt=self.attempt
                    ).update(heartbeat_at=timezone.now())
                except Exception as exc:  # the database may be briefly away: try next beat
                    logger.warning("run.heartbeat_failed run=%s error=%s", self.run_id, exc)
                    # A broken connection stays broken in this thread (nothing else recycles
                    # it): drop it so the next beat reconnects, or the run would look lost.
                    connection.close()
        finally:
            connection.close()
