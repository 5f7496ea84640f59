"""Recording how a claimed run ended, and the runs Celery discarded.

``success`` with a short result and duration only when the body returned; on an exception either
the next attempt (same run, ``attempt + 1``, status ``retrying``, re-published with a countdown
of exponential backoff with jitter) or, after the last attempt, ``failed`` with the error and
traceback. Every final write is conditional on the run still being ``running`` at this attempt,
so a late finish after the run was declared lost changes nothing. Timestamps other hosts compare
with slots are the database's time (:class:`RunTimer`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.utils import timezone

from .. import signals
from ..core.retry import retry_delay
from ..dispatch import Dispatcher, send_runs
from ..ledger import failures
from ..ledger.outbox import OutboxMessage
from ..ledger.statements import finish_run
from ..ledger.transitions import record_discarded, record_unrunnable
from ..models import JobRun, RunStatus
from ..ops import metrics
from ..redaction import redact
from .claim import QUICK_BUDGET, is_id, with_fresh_connection, worker_name

logger = logging.getLogger("django_cluster_cron.worker")

RESULT_LIMIT = 1000


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


def _never() -> bool:
    return False


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What the execution system that delivered a run gives its execution: the dispatcher that
    sends the run's next attempt, the dispatch trace its message carried, and a check of whether
    this process is being ended (a body interrupted by it neither finished nor failed)."""

    dispatcher: Callable[[], Dispatcher]
    traceparent: object = None
    terminating: Callable[[], bool] = _never


@dataclasses.dataclass
class Outcome:
    """How a claimed run ended, decided before anything is written."""

    # "success", "failure" (retried if attempts remain), "final" (failed), "skipped", "missed"
    # (found too late for its job's catch-up policy: the body did not run)
    kind: str
    result: Any = None
    error: BaseException | None = None
    trace: str = ""
    reason: str = ""


def record(delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    """Write the outcome (through a database switchover: tried again on a fresh connection,
    a try whose answer was lost recognised by the claim's token); the status written, or None
    if the run was no longer this attempt's to finish (declared lost meanwhile). A soft time
    limit that fires while this writes does not change what happened: the write is made
    again."""
    record = functools.partial(_record_once, delivery, run, timer, outcome)
    try:
        return with_fresh_connection(record)
    except SoftTimeLimitExceeded:
        return with_fresh_connection(record)


def _record_once(delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    if outcome.kind == "success":
        return _succeed(run, timer, outcome.result)
    if outcome.kind == "skipped":
        return _skip(run, timer, outcome.reason)
    if outcome.kind == "missed":
        return _miss(run, timer, outcome.reason)
    if outcome.kind == "final":
        return _fail(run, timer, outcome)
    return _after_failure(delivery, run, timer, outcome)


def _finish(run: JobRun, timer: RunTimer, label: str = "", **fields: Any) -> bool:
    """Write a final state if the run is still ``running`` at this attempt; True if written.

    ``finished_at`` is the database's time; ``duration`` what this process measured (unless
    ``fields`` says otherwise); ``label`` the metrics' name of the outcome, if not the status's.
    """
    duration = timer.elapsed()
    fields.setdefault("duration", duration)
    updated = finish_run(run.pk, run.attempt, fields, getattr(run, "claim_token", ""))
    for name, value in fields.items():
        setattr(run, name, value)
    run.finished_at = timer.started_at + duration
    if updated:
        _count_outcome(run, fields["status"], fields["duration"], label)
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


def _count_outcome(run: JobRun, status: str, duration: timedelta | None, label: str = "") -> None:
    found = metrics.get()
    if found is metrics.NULL:
        return
    found.run_outcome(label or OUTCOMES.get(status, status)).inc()
    if duration is not None and status != RunStatus.SKIPPED:  # a skipped body did not run
        durations, last_success = found.job_finished(found.job_label(run.job.name))
        durations.observe(duration.total_seconds())
        if status == RunStatus.SUCCESS and run.finished_at is not None:
            last_success.set(run.finished_at.timestamp())


def _skip(run: JobRun, timer: RunTimer, reason: str) -> str | None:
    if not _finish(run, timer, status=RunStatus.SKIPPED, reason=reason[:255]):
        return None
    logger.info("run.skipped run=%s job=%s reason=%s", run.pk, run.job_id, reason)
    signals.send(signals.run_skipped, run, reason=reason)
    return RunStatus.SKIPPED


def _miss(run: JobRun, timer: RunTimer, reason: str) -> str | None:
    """Found too late for its job's catch-up policy: ``missed``, as if never started."""
    fields = {"started_at": None, "heartbeat_at": None, "duration": None}
    if not _finish(run, timer, "missed", status=RunStatus.MISSED, reason=reason[:255], **fields):
        return None
    logger.warning("run.missed run=%s job=%s reason=%s", run.pk, run.job_id, reason)
    return RunStatus.MISSED


def _succeed(run: JobRun, timer: RunTimer, result: Any) -> str | None:
    if not _finish(run, timer, status=RunStatus.SUCCESS, result=_short(result), error=""):
        logger.warning("run.finished_late run=%s: it was declared lost meanwhile", run.pk)
        return None
    logger.info("run.succeeded run=%s job=%s attempt=%s", run.pk, run.job_id, run.attempt)
    failures.note_success(run.job)
    signals.send(signals.run_succeeded, run, result=result)
    return RunStatus.SUCCESS


def _error_text(outcome: Outcome) -> str:
    if outcome.error is None:
        return outcome.reason[:10_000]
    return f"{type(outcome.error).__name__}: {outcome.error}"[:10_000]


def _fail(run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    """The run failed and is not retried (the last attempt, or a failure no retry can fix)."""
    error = _error_text(outcome)
    trace = outcome.trace[:50_000]
    if not _finish(run, timer, status=RunStatus.FAILED, error=error, traceback=trace):
        return None
    logger.warning(
        "run.failed run=%s job=%s attempt=%s error=%s", run.pk, run.job_id, run.attempt, error
    )
    signals.send(signals.run_failed, run, error=outcome.error)
    failures.note_failure(run.job)
    return RunStatus.FAILED


def _after_failure(
    delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome
) -> str | None:
    job = run.job
    if run.attempt > job.max_retries:
        return _fail(run, timer, outcome)
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
        return None
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
    eta = timezone.now() + timedelta(seconds=delay)
    _publish_retry(delivery, run, eta=eta, db_now=timer.now())
    return RunStatus.RETRYING


def _publish_retry(delivery: Delivery, run: JobRun, *, eta: datetime, db_now: datetime) -> None:
    # The re-publish deadline counts from the retry time in database time, like the leader's.
    # The next attempt goes the way this attempt came (the delivery's dispatcher).
    message = OutboxMessage.for_run(run, eta=eta)
    sent = send_runs(delivery.dispatcher(), [message], now=db_now, not_before=run.retry_at)
    if sent.failure is not None:
        # The run stays 'retrying'; the leader's outbox sweep publishes it once overdue.
        logger.error("run.retry_publish_failed run=%s error=%s", run.pk, sent.failure)


def _short(result: Any) -> str:
    """The result as the ledger keeps it: its repr, with secret-looking values of a dict or
    list masked as the admin masks arguments (a task returning its kwargs shows them)."""
    text = repr(redact(result))
    return text if len(text) <= RESULT_LIMIT else text[: RESULT_LIMIT - 1] + "…"


# -- runs Celery discarded ----------------------------------------------------------------------


def on_revoked(
    request: Any, named: tuple[object, object], terminated: bool, signum: Any, expired: bool
) -> None:
    """Celery's ``task_revoked`` for a run's message (``named``: its run id and attempt):
    record why the run did not run.

    An expired message (the job's ``expires``) makes the run ``missed``; a revoke before it
    started, or one that terminated it while running, makes it ``cancelled``. Each write is
    conditional on the run still being in the state that message could have moved it from, so
    a copy revoked after another copy ran changes nothing.
    """
    run_id, attempt = named
    task_id = getattr(request, "id", None)
    if not (is_id(run_id) and is_id(attempt) and task_id):
        return
    assert isinstance(run_id, int)
    assert isinstance(attempt, int)
    try:
        status = with_fresh_connection(
            lambda: record_discarded(
                run_id, str(task_id), attempt, terminated=terminated, expired=expired, signum=signum
            ),
            QUICK_BUDGET,  # Celery's main process: every other message waits meanwhile
        )
    except Exception as exc:  # the message is gone either way; the outbox may send it again
        logger.error("run.revoke_not_recorded run=%s error=%s", run_id, exc)
        return
    if status is not None:
        logger.warning("run.revoked run=%s task_id=%s status=%s", run_id, task_id, status)
        metrics.get().run_outcome(OUTCOMES[RunStatus(status)]).inc()


def on_unknown(named: tuple[object, object], task_id: str, name: str) -> None:
    """Celery's ``task_unknown`` for a run's message: the worker does not have the job's task
    and Celery dropped the message. The run failed (and says where)."""

    run_id, attempt = named
    if not (is_id(run_id) and is_id(attempt) and task_id):
        return
    assert isinstance(run_id, int)
    assert isinstance(attempt, int)
    error = f"task {name!r} is not registered on worker {worker_name()}"
    try:
        failed = with_fresh_connection(
            lambda: record_unrunnable(run_id, task_id, attempt, error), QUICK_BUDGET
        )
    except Exception as exc:  # the outbox sends a queued run again
        logger.error("run.unknown_not_recorded run=%s error=%s", run_id, exc)
        return
    if failed:
        logger.error("run.failed run=%s task_id=%s error=%s", run_id, task_id, error)
        metrics.get().run_outcome("failed").inc()
