"""Recording how a claimed run ended: which ledger transition, then the logs, signals and metrics.

The worker only chooses (:data:`WRITES`); each ending's fields and its guard (the run still
``running`` at this attempt, so a late finish after the run was declared lost changes nothing)
are the ledger's (:mod:`django_cluster_cron.ledger.transitions`). A failure goes to the next
attempt while the job's retries last — ``retrying``, sent again after an exponential backoff
with jitter through the one way runs go out (:func:`django_cluster_cron.dispatch.publish_now`)
— and is ``failed`` after the last. Timestamps other hosts compare with slots are the
database's time (:class:`~.outcome.RunTimer`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.utils import timezone

from .. import signals
from ..core.retry import retry_delay
from ..dispatch import publish_now
from ..ledger import failures, transitions
from ..ledger.outbox import OutboxMessage
from ..models import JobRun, RunStatus
from ..ops import metrics
from ..redaction import redact
from .claim import with_fresh_connection
from .outcome import Delivery, Ending, Outcome, RunTimer

logger = logging.getLogger("django_cluster_cron.worker")

RESULT_LIMIT = transitions.RESULT_LIMIT

# What the metrics call each final status the worker writes.
OUTCOMES = {
    RunStatus.SUCCESS: "succeeded",
    RunStatus.FAILED: "failed",
    RunStatus.RETRYING: "retried",
    RunStatus.SKIPPED: "skipped",
    RunStatus.CANCELLED: "cancelled",
    RunStatus.MISSED: "expired",
}


def record(delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    """Write the outcome (through a database switchover: tried again on a fresh connection,
    a try whose answer was lost recognised by the claim's token); the status written, or None
    if the run was no longer this attempt's to finish (declared lost meanwhile). An exception
    the delivery names as one that may interrupt the record (Celery's soft time limit) does not
    change what happened: the write is made again."""
    write = functools.partial(_record_once, delivery, run, timer, outcome)
    try:
        return with_fresh_connection(write)
    except delivery.record_again:
        return with_fresh_connection(write)


def _record_once(delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    ending = outcome.ending
    if ending is Ending.FAILURE and run.attempt > run.job.max_retries:
        ending = Ending.FINAL
    if run.cancel_requested and ending is not Ending.SPLIT:
        ending = Ending.CANCELLED  # the heartbeat brought a cancel: whatever the body did after
    status = WRITES[ending](delivery, run, timer, outcome)
    if status is None and ending not in (Ending.CANCELLED, Ending.SPLIT):
        # Not written: a cancel reached the row since the last heartbeat (the run is then
        # cancelled whatever it did), or the run was declared lost meanwhile (then neither is).
        status = _stop(delivery, run, timer, outcome)
    if status is None:
        logger.warning("run.finished_late run=%s: it was declared lost meanwhile", run.pk)
    return status


def _counted(run: JobRun, label: str = "") -> None:
    """The run's final status and duration, as the instance holds them after its write, into
    the metrics (``label``: the outcome's name, if not its status's)."""
    found = metrics.get()
    if found is metrics.NULL:
        return
    status = run.status
    found.run_outcome(label or OUTCOMES.get(RunStatus(status), status)).inc()
    if run.duration is not None and status != RunStatus.SKIPPED:  # a skipped body did not run
        durations, last_success = found.job_finished(found.job_label(run.job.name))
        durations.observe(run.duration.total_seconds())
        if status == RunStatus.SUCCESS and run.finished_at is not None:
            last_success.set(run.finished_at.timestamp())


def _succeed(delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    if not transitions.succeeded(
        run, result=short_result(outcome.result), duration=timer.elapsed()
    ):
        return None
    _counted(run)
    logger.info("run.succeeded run=%s job=%s attempt=%s", run.pk, run.job_id, run.attempt)
    failures.note_success(run.job)
    signals.send(signals.run_succeeded, run, result=outcome.result)
    return RunStatus.SUCCESS


def _skip(delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    reason = outcome.reason
    if not transitions.skipped(run, reason=reason, duration=timer.elapsed()):
        return None
    _counted(run)
    if outcome.not_run:  # refused by a policy (not a task that chose not to work)
        metrics.get().not_run(run.job.name, outcome.not_run)
    logger.info("run.skipped run=%s job=%s reason=%s", run.pk, run.job_id, reason)
    signals.send(signals.run_skipped, run, reason=reason)
    return RunStatus.SKIPPED


def _miss(delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    if not transitions.missed(run, reason=outcome.reason):
        return None
    _counted(run, "missed")
    metrics.get().not_run(run.job.name, "catchup_window")
    logger.warning("run.missed run=%s job=%s reason=%s", run.pk, run.job_id, outcome.reason)
    return RunStatus.MISSED


def error_text(outcome: Outcome) -> str:
    """What the ledger says went wrong: the exception's type and message, else the reason."""
    if outcome.error is None:
        return outcome.reason
    return f"{type(outcome.error).__name__}: {outcome.error}"


def _fail(delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    """The run failed and is not retried (the last attempt, or a failure no retry can fix)."""
    error = error_text(outcome)
    if not transitions.failed(run, error=error, trace=outcome.trace, duration=timer.elapsed()):
        return None
    _counted(run)
    logger.warning(
        "run.failed run=%s job=%s attempt=%s error=%s",
        run.pk,
        run.job_id,
        run.attempt,
        run.error,
    )
    signals.send(signals.run_failed, run, error=outcome.error)
    failures.note_failure(run.job)
    return RunStatus.FAILED


def _retry(delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    """The attempt failed and retries remain: the next attempt, sent after the backoff."""
    job = run.job
    delay = retry_delay(run.attempt, base=job.retry_backoff, cap=job.retry_backoff_max)
    failed_attempt = run.attempt
    written = transitions.retrying(
        run,
        # Compared by the leader with the database's clock: computed in database time.
        retry_at=timer.now() + timedelta(seconds=delay),
        error=error_text(outcome),
        trace=outcome.trace,
        duration=timer.elapsed(),
    )
    if not written:
        return None
    _counted(run)
    logger.warning(
        "run.retrying run=%s job=%s failed_attempt=%s delay=%.2fs error=%s",
        run.pk,
        job.pk,
        failed_attempt,
        delay,
        run.error,
    )
    signals.send(signals.run_retrying, run, error=outcome.error, delay=delay)
    # The message's ETA is read by the worker that receives it, against its own clock; the
    # re-publish deadline counts from the retry time in database time, like the leader's. The
    # next attempt goes the way this attempt came (the delivery's dispatcher).
    message = OutboxMessage.for_run(run, eta=timezone.now() + timedelta(seconds=delay))
    sent = publish_now(delivery.dispatcher(), [message], now=timer.now(), not_before=run.retry_at)
    if sent.failure is not None:
        # The run stays 'retrying'; the leader's outbox sweep publishes it once overdue.
        logger.error("run.retry_publish_failed run=%s error=%s", run.pk, sent.failure)
    return RunStatus.RETRYING


def partial_outcome(outcome: Outcome) -> str:
    """What a cancelled run's body had done, in the words its ``error`` keeps."""
    ending = outcome.ending
    if ending is Ending.CANCELLED:
        return f"cancelled while running: the body stopped ({error_text(outcome)})"
    if ending is Ending.SUCCESS:
        return f"cancelled while running: the body returned {short_result(outcome.result)}"
    if not outcome.body_ran:
        return f"cancelled before its body ran: {outcome.reason}"
    return f"cancelled while running: the body failed ({error_text(outcome)})"


def _stop(delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    """A cancel was asked for while the run executed: ``cancelled``, with what its body did,
    never retried and never counted as a failure of its job."""
    partial = partial_outcome(outcome)
    if not transitions.stopped(run, error=partial, trace=outcome.trace, duration=timer.elapsed()):
        return None
    if not run.cancel_requested:  # the cancel reached the row after the last heartbeat
        asked = JobRun.objects.filter(pk=run.pk).values_list(
            "cancel_requested_at", "cancel_requested_by"
        )
        run.cancel_requested_at, run.cancel_requested_by = asked.get()
    _counted(run)
    metrics.get().not_run(run.job.name, "cancelled")
    logger.warning(
        "run.cancelled run=%s job=%s by=%s: %s",
        run.pk,
        run.job_id,
        run.cancel_requested_by or "the task itself",
        partial,
    )
    signals.send(signals.run_cancelled, run, by=run.cancel_requested_by, outcome=partial)
    return RunStatus.CANCELLED


def _split(delivery: Delivery, run: JobRun, timer: RunTimer, outcome: Outcome) -> str | None:
    """Split into pieces (written by the split itself): the run goes on ``running``; None when
    the split found the run no longer this attempt's (declared lost meanwhile)."""
    if not run.piece_count:
        return None
    logger.info("run.split run=%s job=%s pieces=%s", run.pk, run.job_id, run.piece_count)
    return RunStatus.RUNNING


# Which ledger write each ending makes (a failure becomes FINAL once the job's retries are
# spent).
WRITES: dict[Ending, Callable[[Delivery, JobRun, RunTimer, Outcome], str | None]] = {
    Ending.SUCCESS: _succeed,
    Ending.FAILURE: _retry,
    Ending.FINAL: _fail,
    Ending.SKIPPED: _skip,
    Ending.MISSED: _miss,
    Ending.CANCELLED: _stop,
    Ending.SPLIT: _split,
}


def short_result(result: Any) -> str:
    """The result as the ledger keeps it: its repr, with secret-looking values of a dict or
    list masked as the admin masks arguments (a task returning its kwargs shows them)."""
    text = repr(redact(result))
    return text if len(text) <= RESULT_LIMIT else text[: RESULT_LIMIT - 1] + "…"
