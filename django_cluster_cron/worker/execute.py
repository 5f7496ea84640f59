"""Executing one run on a Celery worker: claim, guard, run, record, retry.

1. **Claim** — ``UPDATE jobrun SET status='running' … WHERE id = <run> AND task_id = <this
   message's id> AND attempt = <the message's attempt> AND status IN ('pending', 'queued',
   'retrying') AND (due_at IS NULL OR due_at <= now)``. Exactly one delivery of a message can
   match; every other copy (outbox re-publish, broker redelivery, a stale leader's publish, a
   forged or late message) matches nothing, is counted as a duplicate delivery and acknowledged
   without running anything. A message that arrives a moment before its run is due waits for it
   (:mod:`.claim`).
2. **Late** — a slot's run that no leader recorded as sent and that is past the on-time grace
   (a message deferred on its backend while every scheduler was stopped) goes by its job's
   catch-up policy: ``missed`` without running, or run as a ``catchup`` run
   (:mod:`django_cluster_cron.ledger.late`).
3. **Overlap** — for jobs whose overlap policy is not ``allow``, the per-job execution lock
   (a :class:`~django_cluster_cron.locks.ClusterLock` named ``job:<id>``) decides: ``skip`` records
   the run ``skipped`` if another run of the job holds it; ``buffer_one`` lets one run wait for it
   and skips any further one.
4. **Run** — the job's registered task is called in-process with the job's args and kwargs while a
   heartbeat thread stamps ``heartbeat_at``; the leader declares a run whose heartbeat stops
   *lost* (see :func:`django_cluster_cron.ledger.transitions.recover_lost`).
5. **Record** — ``success`` with a short result and duration only when the body returned; on an
   exception either the next attempt (same run, ``attempt + 1``, status ``retrying``,
   re-published with a countdown of exponential backoff with jitter) or, after the last attempt,
   ``failed`` with the error and traceback. A body that raised Celery's ``Ignore`` is recorded
   ``skipped``, one that raised ``Reject`` ``failed`` (retried only if it asked to be requeued).
   Every final write is conditional on the run still being ``running`` at this attempt, so a late
   finish after the run was declared lost changes nothing (:mod:`.record`).

What the ledger never does: record a finished status for a message it rejected (malformed or
forged: the row stays as it was), or ``success`` for a body that did not return. Messages Celery
discards before they run (revoked, expired) are recorded by :func:`.record.on_revoked`.
Timestamps other hosts compare with slots (``started_at``, ``heartbeat_at``, ``finished_at``,
``retry_at``) are the database's time, so a worker whose clock is off cannot make a live run
look lost.
"""

from __future__ import annotations

import contextvars
import logging
import time
import traceback
from collections.abc import Callable
from typing import Any

from celery.exceptions import Ignore, Reject, Retry
from django.utils import timezone

from .. import signals
from ..conf import app_settings
from ..leases.lock import ClusterLock, LockUnavailable
from ..ledger.late import judge_claimed
from ..models import JobDefinition, JobRun
from ..ops import metrics, tracing
from .claim import (
    EarlyMessage,
    claim,
    count_duplicate,
    is_id,
    message_header,
    new_token,
    through_switchover,
    worker_name,
)
from .heartbeat import RunHeartbeat
from .record import Delivery, Outcome, RunTimer, record

logger = logging.getLogger("django_cluster_cron.worker")


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


class CalledDirectly(RuntimeError):
    """``execute_run`` was called as a function (a job scheduling it), not delivered by Celery."""


def execute(task: Any, run_id: object, attempt: object) -> None:
    """``execute_run(run_id, attempt)``: the message form of workers before 0.2, still sent
    while such workers may be up. Calls the job's task in-process once it owns the run."""
    if getattr(task.request, "called_directly", False):
        # A job whose task is execute_run itself would call it here with the job's arguments:
        # fail that job's run loudly instead of "succeeding" without running anything.
        raise CalledDirectly(
            "django_cluster_cron.execute_run runs a run the scheduler recorded and is delivered "
            "by Celery; it cannot be called as a function or scheduled as a job's task."
        )
    if not is_id(run_id) or not is_id(attempt):
        # Not a message the scheduler sends (a forged or corrupted one): acknowledge, ignore.
        logger.warning(
            "run.rejected_message task_id=%s args=%r: run id and attempt must be positive integers",
            task.request.id,
            [run_id, attempt],
        )
        return
    assert isinstance(run_id, int)
    assert isinstance(attempt, int)
    run = take(run_id, task.request.id, attempt)
    if run is None:
        return

    def call() -> Any:
        job = run.job
        body = task.app.tasks.get(job.task)
        if body is None:
            raise LookupError(f"task {job.task!r} is not registered on worker {worker_name()}")
        return body(*job.args, **job.kwargs)

    carry_out(celery_delivery(task), run, call)


def celery_delivery(task: Any) -> Delivery:
    """A run delivered by Celery as ``task``: its next attempt goes the same way (the same
    message form: a worker that received the job's own task knows the leader found every worker
    able to run that form), and billiard's terminate handler says when the process is ending."""
    from ..dispatch.celery import EXECUTE_TASK, CeleryDispatcher

    def dispatcher() -> CeleryDispatcher:
        return CeleryDispatcher(task.app, own_task=task.name != EXECUTE_TASK)

    return Delivery(
        dispatcher=dispatcher,
        traceparent=message_header(task.request, tracing.HEADER),
        terminating=_terminate_signal_handled,
    )


def take(run_id: int, task_id: str, attempt: int, result_id: str = "") -> JobRun | None:
    """Claim the run for this delivery; None (logged and counted) if another copy has it.
    ``result_id``: the execution backend's own id of this attempt's result, kept on the run."""
    claiming = time.perf_counter()
    token = new_token()
    try:
        run = through_switchover(
            lambda retried: claim(run_id, task_id, attempt, result_id, token, retried)
        )
    except EarlyMessage:
        return None
    if run is None:
        count_duplicate(run_id, task_id)
        return None
    found = metrics.get()
    found.claim.observe(time.perf_counter() - claiming)
    found.run_outcome("claimed").inc()
    return run


def carry_out(
    delivery: Delivery, run: JobRun, call: Callable[[], Any]
) -> tuple[Outcome, str | None]:
    """Guard and run a claimed run's body (``call``), record how it ended; return the outcome
    and the status written (None if nothing was: the run was declared lost meanwhile)."""
    with tracing.executing(run, delivery.traceparent) as span:
        outcome, status = _carry_out(delivery, run, call)
        span.ended(status, outcome.error, outcome.reason)
    return outcome, status


def _carry_out(
    delivery: Delivery, run: JobRun, call: Callable[[], Any]
) -> tuple[Outcome, str | None]:
    timer = RunTimer(run.started_at or timezone.now())
    try:
        outcome = _run_claimed(run, call)
    except Exception as exc:
        # Escaped before the body ran (e.g. the soft time limit while waiting for the overlap
        # lock): the run failed; it did not succeed.
        outcome = Outcome("failure", error=exc, trace=traceback.format_exc())
    except BaseException as exc:
        if delivery.terminating():
            # A signal is ending this process (a Celery revoke with terminate=True, a cold
            # shutdown, a db_worker forced to stop): the body did not finish and did not fail.
            # Write nothing: Celery's main process records a terminating revoke as cancelled
            # (on_revoked), and any other end is a lost run for the leader's heartbeat sweep
            # (the job's on_worker_lost). Recording "failed" here would race the cancel and
            # could win.
            logger.warning(
                "run.interrupted run=%s attempt=%s: the process is terminating", run.pk, run.attempt
            )
            raise
        # The body itself raised SystemExit or KeyboardInterrupt: its run failed.
        outcome = Outcome("failure", error=exc, trace=traceback.format_exc())
        record(delivery, run, timer, outcome)
        raise
    return outcome, record(delivery, run, timer, outcome)


def _terminate_signal_handled() -> bool:
    """Has billiard's handler for a terminate signal run in this process? It raises SystemExit
    in whatever the process was doing, so an exception seen after it is the process ending."""
    from billiard import common

    fired = getattr(common, "terminate_handler_fired", None)
    if fired is not None:
        return bool(fired())
    return bool(getattr(common, "_should_have_exited", [False])[0])  # billiard < 4.3


def _run_claimed(run: JobRun, call: Callable[[], Any]) -> Outcome:
    """Guard, then call the job's task; say how it ended. Writes only a ``skipped`` refusal, and
    the trigger of a run that no leader sent at its time and that its catch-up policy runs late
    (one it does not run ends ``missed``: :func:`..ledger.late.judge_claimed`)."""
    job = run.job
    problem = job.runtime_problem()
    if problem is not None:
        logger.error("run.invalid_job run=%s job=%s: %s", run.pk, job.pk, problem)
        return Outcome("final", reason=f"invalid job definition: {problem}")
    missed = judge_claimed(run)
    if missed:
        return Outcome("missed", reason=missed)
    try:
        gate = _overlap_gate(job, run)
    except SkipRun as refusal:
        return Outcome("skipped", reason=str(refusal))
    except LockUnavailable as exc:
        return Outcome("failure", error=exc, trace=f"overlap lock unavailable: {exc}")
    signals.send(signals.run_started, run)
    heartbeat = RunHeartbeat(run.pk, run.attempt)
    heartbeat.start()
    token = _current_run.set(run)
    try:
        try:
            result = call()
        finally:
            heartbeat.stop()
    except Ignore as exc:
        # The task chose not to do its work (Celery's Ignore, also raised by Task.replace).
        return Outcome("skipped", reason=f"the task raised Ignore: {exc}".rstrip(": "))
    except Reject as exc:
        # Reject(requeue=True) asks to be tried again later: an ordinary failure, retried by
        # the job's policy. Without requeue the task refuses the work: failed, no retry.
        if getattr(exc, "requeue", False):
            return Outcome("failure", error=exc, trace=traceback.format_exc())
        return Outcome("final", error=exc, trace=traceback.format_exc())
    except Retry as exc:
        # self.retry() or autoretry_for: a failure, retried by the job's policy (the copy
        # Celery sent loses the claim). The error is the one the task retried for, if it said.
        error = exc.exc if isinstance(exc.exc, Exception) else exc
        return Outcome("failure", error=error, trace=traceback.format_exc())
    except Exception as exc:
        return Outcome("failure", error=exc, trace=traceback.format_exc())
    finally:
        _current_run.reset(token)
        if gate is not None:
            _release_quietly(gate)
    return Outcome("success", result=result)


def _release_quietly(gate: ClusterLock) -> None:
    try:
        gate.release()
    except Exception as exc:  # it expires with its TTL; the run's outcome is what matters
        logger.warning("run.overlap_release_failed lock=%s error=%s", gate.name, exc)


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
