"""Executing one run on a Celery worker: claim, guard, run, record, retry.

1. **Claim** — ``UPDATE jobrun SET status='running' … WHERE id = <run> AND task_id = <this
   message's id> AND attempt = <the message's attempt> AND status IN ('pending', 'queued',
   'retrying') AND (due_at IS NULL OR due_at <= now)``. Exactly one delivery of a message can
   match; every other copy (outbox re-publish, broker redelivery, a stale leader's publish, a
   forged or late message) matches nothing, is counted as a duplicate delivery and acknowledged
   without running anything. A message that arrives a moment before its run is due waits for it
   (see :func:`claim`).
2. **Overlap** — for jobs whose overlap policy is not ``allow``, the per-job execution lock
   (a :class:`~django_cluster_cron.locks.ClusterLock` named ``job:<id>``) decides: ``skip`` records
   the run ``skipped`` if another run of the job holds it; ``buffer_one`` lets one run wait for it
   and skips any further one.
3. **Run** — the job's registered task is called in-process with the job's args and kwargs while a
   heartbeat thread stamps ``heartbeat_at``; the leader declares a run whose heartbeat stops
   *lost* (see :func:`django_cluster_cron.ledger.transitions.recover_lost`).
4. **Record** — ``success`` with a short result and duration only when the body returned; on an
   exception either the next attempt (same run, ``attempt + 1``, status ``retrying``,
   re-published with a countdown of exponential backoff with jitter) or, after the last attempt,
   ``failed`` with the error and traceback. A body that raised Celery's ``Ignore`` is recorded
   ``skipped``, one that raised ``Reject`` ``failed`` (retried only if it asked to be requeued).
   Every final write is conditional on the run still being ``running`` at this attempt, so a late
   finish after the run was declared lost changes nothing.

What the ledger never does: record a finished status for a message it rejected (malformed or
forged: the row stays as it was), or ``success`` for a body that did not return. Messages Celery
discards before they run (revoked, expired) are recorded by :func:`on_revoked`. Timestamps other
hosts compare with slots (``started_at``, ``heartbeat_at``, ``finished_at``, ``retry_at``) are the
database's time, so a worker whose clock is off cannot make a live run look lost.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
import os
import socket
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from celery.exceptions import Ignore, Reject, SoftTimeLimitExceeded
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from .. import signals
from ..conf import app_settings
from ..coordination import get_coordination
from ..core.retry import retry_delay
from ..dispatch import send_runs
from ..dispatch.celery import CeleryDispatcher
from ..leases.lock import ClusterLock, LockUnavailable
from ..ledger import failures
from ..ledger.outbox import OutboxMessage
from ..ledger.statements import claim_run, finish_run, seconds_until_due
from ..ledger.transitions import record_discarded
from ..models import JobDefinition, JobRun, RunStatus
from ..ops import metrics
from .heartbeat import RunHeartbeat

logger = logging.getLogger("django_cluster_cron.worker")

RESULT_LIMIT = 1000


_worker_name: tuple[int, str] = (0, "")


def worker_name() -> str:
    """``host:pid`` of this process (computed once per process)."""
    global _worker_name
    pid = os.getpid()
    if _worker_name[0] != pid:
        _worker_name = (pid, f"{socket.gethostname()}:{pid}")
    return _worker_name[1]


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


class EarlyMessage(Exception):
    """A message for a run not due for a while: dropped, not counted as a duplicate."""


class CalledDirectly(RuntimeError):
    """``execute_run`` was called as a function (a job scheduling it), not delivered by Celery."""


class RunTimer:
    """Database time for a run's timestamps, whatever the worker's own clock says.

    The claim stamps ``started_at`` with the database's clock; from then on "now" in database
    time is that start plus the time this process measured since (a monotonic clock), so a
    worker whose clock is off still writes retry times the leader compares correctly.
    """

    def __init__(self, started_at: datetime) -> None:
        self.started_at = started_at
        self._start = time.monotonic()

    def elapsed(self) -> timedelta:
        return timedelta(seconds=time.monotonic() - self._start)

    def now(self) -> datetime:
        return self.started_at + self.elapsed()


@dataclasses.dataclass
class Outcome:
    """How a claimed run ended, decided before anything is written."""

    kind: str  # "success", "failure" (retried if attempts remain), "final" (failed), "skipped"
    result: Any = None
    error: BaseException | None = None
    trace: str = ""
    reason: str = ""


def execute(task: Any, run_id: object, attempt: object) -> None:
    if getattr(task.request, "called_directly", False):
        # A job whose task is execute_run itself would call it here with the job's arguments:
        # fail that job's run loudly instead of "succeeding" without running anything.
        raise CalledDirectly(
            "django_cluster_cron.execute_run runs a run the scheduler recorded and is delivered "
            "by Celery; it cannot be called as a function or scheduled as a job's task."
        )
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
    claiming = time.perf_counter()
    try:
        run = _with_fresh_connection(lambda: claim(run_id, task.request.id, attempt))
    except EarlyMessage:
        return
    if run is None:
        count_duplicate(run_id, task.request.id)
        return
    found = metrics.get()
    found.claim.observe(time.perf_counter() - claiming)
    found.runs.labels(outcome="claimed").inc()
    timer = RunTimer(run.started_at or timezone.now())
    try:
        outcome = _run_claimed(task, run)
    except Exception as exc:
        # Escaped before the body ran (e.g. the soft time limit while waiting for the overlap
        # lock): the run failed; it did not succeed.
        outcome = Outcome("failure", error=exc, trace=traceback.format_exc())
    except BaseException as exc:
        if _terminate_signal_handled():
            # A signal is ending this pool process (a revoke with terminate=True, a cold
            # shutdown): the body did not finish and did not fail. Write nothing: the worker's
            # main process records a terminating revoke as cancelled (on_revoked), and any
            # other end is a lost run for the leader's heartbeat sweep (the job's
            # on_worker_lost). Recording "failed" here would race the cancel and could win.
            logger.warning(
                "run.interrupted run=%s attempt=%s: the process is terminating", run.pk, run.attempt
            )
            raise
        # The body itself raised SystemExit or KeyboardInterrupt: its run failed.
        outcome = Outcome("failure", error=exc, trace=traceback.format_exc())
        _record(task, run, timer, outcome)
        raise
    _record(task, run, timer, outcome)


def _terminate_signal_handled() -> bool:
    """Has billiard's handler for a terminate signal run in this process? It raises SystemExit
    in whatever the process was doing, so an exception seen after it is the process ending."""
    from billiard import common

    fired = getattr(common, "terminate_handler_fired", None)
    if fired is not None:
        return bool(fired())
    return bool(getattr(common, "_should_have_exited", [False])[0])  # billiard < 4.3


def _run_claimed(task: Any, run: JobRun) -> Outcome:
    """Guard, then call the job's task; say how it ended. Writes only a ``skipped`` refusal."""
    job = run.job
    problem = job.runtime_problem()
    if problem is not None:
        logger.error("run.invalid_job run=%s job=%s: %s", run.pk, job.pk, problem)
        return Outcome("final", reason=f"invalid job definition: {problem}")
    body = task.app.tasks.get(job.task)
    if body is None:
        error = LookupError(f"task {job.task!r} is not registered on worker {worker_name()}")
        return Outcome("failure", error=error, trace="")
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
            result = body(*job.args, **job.kwargs)
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
    except Exception as exc:
        return Outcome("failure", error=exc, trace=traceback.format_exc())
    finally:
        _current_run.reset(token)
        if gate is not None:
            _release_quietly(gate)
    return Outcome("success", result=result)


def _record(task: Any, run: JobRun, timer: RunTimer, outcome: Outcome) -> None:
    """Write the outcome (reconnecting once if the connection broke). A soft time limit that
    fires while this writes does not change what happened: the write is made again."""
    record = functools.partial(_record_once, task, run, timer, outcome)
    try:
        _with_fresh_connection(record)
    except SoftTimeLimitExceeded:
        _with_fresh_connection(record)


def _record_once(task: Any, run: JobRun, timer: RunTimer, outcome: Outcome) -> None:
    if outcome.kind == "success":
        _succeed(run, timer, outcome.result)
    elif outcome.kind == "skipped":
        _skip(run, timer, outcome.reason)
    elif outcome.kind == "final":
        _fail(run, timer, outcome)
    else:
        _after_failure(task, run, timer, outcome)


def _release_quietly(gate: ClusterLock) -> None:
    try:
        gate.release()
    except Exception as exc:  # it expires with its TTL; the run's outcome is what matters
        logger.warning("run.overlap_release_failed lock=%s error=%s", gate.name, exc)


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


# A message that arrives before its run is due (its publisher's clock estimate was off by a
# few milliseconds) waits this long at most, then claims again; one earlier than that is left to
# the leader's outbox, which sends it again once the run is due.
EARLY_WAIT_LIMIT = 5.0


def claim(run_id: int, task_id: str, attempt: int) -> JobRun | None:
    """Take the run for this delivery (one delivery can win); stamps are database time.

    The claim only takes a run that is due: a message early by up to ``EARLY_WAIT_LIMIT``
    waits for it; an earlier one is acknowledged without running (``run.early_message``).
    """
    for _ in range(3):
        run = claim_run(run_id, task_id, attempt, worker_name())
        if run is not None:
            return run
        wait = seconds_until_due(run_id, task_id, attempt)
        if wait is None:
            return None
        if wait > EARLY_WAIT_LIMIT:
            logger.warning(
                "run.early_message run=%s task_id=%s due_in=%.3fs: not run; the outbox sends it "
                "again once it is due",
                run_id,
                task_id,
                wait,
            )
            raise EarlyMessage(run_id)
        time.sleep(wait + 0.001)
    return None


DUPLICATES = "duplicate_deliveries"


def count_duplicate(run_id: object, task_id: object) -> None:
    """A delivery that lost the claim: log it and bump the cluster-wide counter."""
    logger.info("run.duplicate_delivery run=%s task_id=%s", run_id, task_id)
    metrics.get().duplicates.inc()
    get_coordination().counters.incr(DUPLICATES)


def duplicate_deliveries() -> int:
    """Deliveries dropped by the claim, cluster-wide, since the counter was created."""
    return get_coordination().counters.value(DUPLICATES)


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


# -- recording -------------------------------------------------------------------------------


def _finish(run: JobRun, timer: RunTimer, **fields: Any) -> bool:
    """Write a final state if the run is still ``running`` at this attempt; True if written.

    ``finished_at`` is the database's time; ``duration`` what this process measured.
    """
    duration = timer.elapsed()
    fields.setdefault("duration", duration)
    updated = finish_run(run.pk, run.attempt, fields)
    for name, value in fields.items():
        setattr(run, name, value)
    run.finished_at = timer.started_at + duration
    if updated:
        _count_outcome(run, fields["status"], duration)
    return bool(updated)


# What the metrics call each final status the worker writes.
OUTCOMES = {
    RunStatus.SUCCESS: "succeeded",
    RunStatus.FAILED: "failed",
    RunStatus.RETRYING: "retried",
    RunStatus.SKIPPED: "skipped",
    RunStatus.CANCELLED: "cancelled",
    RunStatus.MISSED: "expired",
}


def _count_outcome(run: JobRun, status: str, duration: timedelta | None) -> None:
    found = metrics.get()
    found.runs.labels(outcome=OUTCOMES.get(status, status)).inc()
    if duration is not None and status != RunStatus.SKIPPED:  # a skipped body did not run
        job = found.job_label(run.job.name) if found is not metrics.NULL else ""
        found.run_duration.labels(job=job).observe(duration.total_seconds())
        if status == RunStatus.SUCCESS and run.finished_at is not None:
            found.last_success.labels(job=job).set(run.finished_at.timestamp())


def _skip(run: JobRun, timer: RunTimer, reason: str) -> None:
    if _finish(run, timer, status=RunStatus.SKIPPED, reason=reason[:255]):
        logger.info("run.skipped run=%s job=%s reason=%s", run.pk, run.job_id, reason)
        signals.send(signals.run_skipped, run, reason=reason)


def _succeed(run: JobRun, timer: RunTimer, result: Any) -> None:
    if _finish(run, timer, status=RunStatus.SUCCESS, result=_short(result), error=""):
        logger.info("run.succeeded run=%s job=%s attempt=%s", run.pk, run.job_id, run.attempt)
        failures.note_success(run.job)
        signals.send(signals.run_succeeded, run, result=result)
    else:
        logger.warning("run.finished_late run=%s: it was declared lost meanwhile", run.pk)


def _error_text(outcome: Outcome) -> str:
    if outcome.error is None:
        return outcome.reason[:10_000]
    return f"{type(outcome.error).__name__}: {outcome.error}"[:10_000]


def _fail(run: JobRun, timer: RunTimer, outcome: Outcome) -> None:
    """The run failed and is not retried (the last attempt, or a failure no retry can fix)."""
    error = _error_text(outcome)
    if _finish(run, timer, status=RunStatus.FAILED, error=error, traceback=outcome.trace[:50_000]):
        logger.warning(
            "run.failed run=%s job=%s attempt=%s error=%s", run.pk, run.job_id, run.attempt, error
        )
        signals.send(signals.run_failed, run, error=outcome.error)
        failures.note_failure(run.job)


def _after_failure(task: Any, run: JobRun, timer: RunTimer, outcome: Outcome) -> None:
    job = run.job
    if run.attempt > job.max_retries:
        _fail(run, timer, outcome)
        return
    error = _error_text(outcome)
    delay = retry_delay(run.attempt, base=job.retry_backoff, cap=job.retry_backoff_max)
    # Compared by the leader with the database's clock: computed in database time.
    retry_at = timer.now() + timedelta(seconds=delay)
    failed_attempt = run.attempt
    if not _finish(
        run,
        timer,
        status=RunStatus.RETRYING,
        attempt=run.attempt + 1,
        retry_at=retry_at,
        # Until the retry message is confirmed sent, the outbox treats it as unsent.
        republish_at=retry_at,
        error=error,
        traceback=outcome.trace[:50_000],
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
    signals.send(signals.run_retrying, run, error=outcome.error, delay=delay)
    # The message's ETA is read by the worker that receives it, against its own clock.
    _publish_retry(task, run, eta=timezone.now() + timedelta(seconds=delay), db_now=timer.now())


def _publish_retry(task: Any, run: JobRun, *, eta: datetime, db_now: datetime) -> None:
    # The re-publish deadline counts from the retry time in database time, like the leader's.
    message = OutboxMessage.for_run(run, eta=eta)
    sent = send_runs(CeleryDispatcher(task.app), [message], now=db_now, not_before=run.retry_at)
    if sent.failure is not None:
        # The run stays 'retrying'; the leader's outbox sweep publishes it once overdue.
        logger.error("run.retry_publish_failed run=%s error=%s", run.pk, sent.failure)


def _short(result: Any) -> str:
    text = repr(result)
    return text if len(text) <= RESULT_LIMIT else text[: RESULT_LIMIT - 1] + "…"


# -- runs Celery discarded ----------------------------------------------------------------------


def on_revoked(request: Any, terminated: bool, signum: Any, expired: bool) -> None:
    """Celery's ``task_revoked`` for an ``execute_run`` message: record why the run did not run.

    An expired message (the job's ``expires``) makes the run ``missed``; a revoke before it
    started, or one that terminated it while running, makes it ``cancelled``. Each write is
    conditional on the run still being in the state that message could have moved it from, so
    a copy revoked after another copy ran changes nothing.
    """
    args = list(getattr(request, "args", None) or ())
    run_id = args[0] if args else None
    attempt = args[1] if len(args) > 1 else 1
    task_id = getattr(request, "id", None)
    if not (_is_id(run_id) and _is_id(attempt) and task_id):
        return
    assert isinstance(run_id, int)
    assert isinstance(attempt, int)
    try:
        status = _with_fresh_connection(
            lambda: record_discarded(
                run_id, str(task_id), attempt, terminated=terminated, expired=expired, signum=signum
            )
        )
    except Exception as exc:  # the message is gone either way; the outbox may send it again
        logger.error("run.revoke_not_recorded run=%s error=%s", run_id, exc)
        return
    if status is not None:
        logger.warning("run.revoked run=%s task_id=%s status=%s", run_id, task_id, status)
        metrics.get().runs.labels(outcome=OUTCOMES[RunStatus(status)]).inc()
