"""Operator actions: run now, backfill, retry (a run, or a run's failed pieces), cancel, pause
and resume.

The admin (and any code of yours) calls these. They write the ledger like the scheduler does —
one row per (job, slot), the overlap policy applied, the row recorded before it is published —
but they are operator writes, not leader writes, so they carry no fencing epoch. A run whose
publish fails stays ``pending`` and the leader's outbox sends it later.
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from . import dispatch
from .celery_app import terminate_refusal
from .conf import app_settings
from .core.overlap import Decision, OverlapPolicy, Verdict
from .dbtime import database_now
from .dispatch import default_dispatcher, publish_now
from .ledger import buffer, piece_moves, transitions
from .ledger.buffer import preempt
from .ledger.outbox import OutboxMessage
from .ledger.rows import activity, dispatchable_run
from .models import JobDefinition, JobRun, RunStatus, RunTrigger
from .models.changes import record_change
from .ops import metrics
from .validation.task import task_errors

# The logger keeps the name it has always had (logging configurations and alerts name it).
logger = logging.getLogger("django_cluster_cron.operations")

BACKFILL_LIMIT = 1000


class ActionRefused(Exception):
    """The action cannot be done; the message says why (shown to the operator)."""


def _activity(job: JobDefinition) -> Counter[str]:
    return activity([job.pk])[job.pk]


def publish(runs: list[JobRun]) -> int:
    """Publish pending runs now; mark the ones the broker took ``queued``. Returns that count."""
    pending = [r for r in runs if r.status == RunStatus.PENDING]
    if not pending:
        return 0
    messages = [
        OutboxMessage.for_run(run)
        for run in JobRun.objects.select_related("job").filter(pk__in=[r.pk for r in pending])
    ]
    sent = publish_now(default_dispatcher(), messages, now=database_now())
    if sent.failure is not None:
        logger.error("operations.publish_failed error=%s (the outbox will retry)", sent.failure)
    return len(sent.messages)


def overlap_override(job: JobDefinition, policy: str | None) -> str | None:
    """An operator's overlap policy for a run now or a backfill, checked: one of the six, and
    ``terminate_other`` only where the job's runs can be terminated. None: the default."""
    if policy is None or policy == "":
        return None
    if policy not in {choice.value for choice in OverlapPolicy}:
        known = ", ".join(choice.value for choice in OverlapPolicy)
        raise ActionRefused(f"Unknown overlap policy {policy!r}: use one of {known}.")
    if policy == OverlapPolicy.TERMINATE_OTHER.value:
        probe = copy.copy(job)
        probe.overlap_policy = policy
        refused = task_errors(probe).get("overlap_policy")
        if refused is not None:
            raise ActionRefused(" ".join(refused.messages))
    return policy


def _recorded(job: JobDefinition, runs: list[tuple[JobRun, Decision]], policy: str | None) -> None:
    """Insert an operator's runs; a run that preempts (cancel_other, terminate_other) stops
    the job's runs ahead of it, in the same transaction."""
    with transaction.atomic():
        JobRun.objects.bulk_create([run for run, _ in runs], ignore_conflicts=True)
        newest = max((run.scheduled_for for run, d in runs if d.stop_others), default=None)
        if newest is not None:
            preempt(job, newest, policy=policy)
    for _run, decision in runs:
        if decision.verdict is Verdict.SKIP:
            metrics.get().not_run(job.name, decision.why_not_run)


def kwargs_override(job: JobDefinition, kwargs: Any) -> dict[str, Any] | None:
    """An operator's keyword arguments for one run, checked as the job's own are (a JSON
    object its task takes, over the job's). None: the job's."""
    if kwargs is None:
        return None
    if not isinstance(kwargs, dict):
        raise ActionRefused(f"The run's kwargs must be a JSON object; got {kwargs!r:.80}.")
    probe = copy.copy(job)
    probe.kwargs = {**(job.kwargs or {}), **kwargs}
    refused = task_errors(probe).get("kwargs")
    if refused is not None:
        raise ActionRefused(" ".join(refused.messages))
    return kwargs


def run_now(
    job: JobDefinition,
    *,
    by: str = "admin",
    overlap_policy: str | None = None,
    kwargs: dict[str, Any] | None = None,
) -> JobRun:
    """Record and publish a ``manual`` run of ``job`` for now; its schedule does not move. It
    goes through the job's overlap policy, or ``overlap_policy`` if the operator gives one;
    ``kwargs`` are given to its task over the job's own, for this run alone."""
    policy = overlap_override(job, overlap_policy)
    override = kwargs_override(job, kwargs)
    counts = _activity(job)
    now = database_now()
    try:
        with transaction.atomic():
            run, decision = dispatchable_run(
                job, now, RunTrigger.MANUAL, counts, node=by, policy=policy
            )
            run.kwargs_override = override
            run.save()
            if decision.stop_others:
                preempt(job, now, policy=policy)
    except IntegrityError:
        raise ActionRefused("A run for this very instant already exists; try again.") from None
    if decision.verdict is Verdict.SKIP:
        metrics.get().not_run(job.name, decision.why_not_run)
    if decision.stop_others:  # the runs ahead may all have been cancelled: nothing to wait for
        run = next((r for r in buffer.release([job.pk], now=now).runs if r.pk == run.pk), run)
    publish([run])
    run.refresh_from_db()
    record_change(job, "run_now", note=f"run {run.pk} ({run.status})")
    logger.info("run.manual job=%s run=%s status=%s by=%s", job.pk, run.pk, run.status, by)
    return run


# What a backfill runs again of the runs its range has already: none (only the slots without a
# run), the failed ones, or every run that has ended (a run split into pieces is left alone).
REPROCESS = ("none", "failed", "all")


@dataclass(frozen=True)
class BackfillPlan:
    slots: list[datetime]  # slots in the range that have no run yet
    existing: int  # slots in the range that already have a run (left alone unless reprocessed)
    truncated: bool  # the range holds more than BACKFILL_LIMIT new slots
    again: tuple[JobRun, ...] = ()  # runs of the range it runs again (``reprocess``)


def plan_backfill(
    job: JobDefinition, start: datetime, end: datetime, reprocess: str = "none"
) -> BackfillPlan:
    """The slots of ``job`` in ``(start, end]`` a backfill would create (bounded), and the runs
    of the range it would run again: ``reprocess`` "failed" its failed runs, "all" every run
    that has ended."""
    if reprocess not in REPROCESS:
        raise ActionRefused(f"Unknown reprocess {reprocess!r}: use one of {', '.join(REPROCESS)}.")
    if end <= start:
        raise ActionRefused("The end of the range must be after its start.")
    if end > database_now():
        raise ActionRefused("A backfill covers the past only; the end is in the future.")
    slots: list[datetime] = []
    truncated = False
    for slot in job.schedule.iter_after(start):
        if slot > end:
            break
        if len(slots) >= BACKFILL_LIMIT * 2:
            truncated = True
            break
        slots.append(slot)
    taken = set(
        JobRun.objects.filter(job=job, scheduled_for__in=slots).values_list(
            "scheduled_for", flat=True
        )
    )
    new = [s for s in slots if s not in taken]
    if len(new) > BACKFILL_LIMIT:
        new, truncated = new[:BACKFILL_LIMIT], True
    again: tuple[JobRun, ...] = ()
    if reprocess != "none":
        ended = (
            (RunStatus.FAILED,)
            if reprocess == "failed"
            else (RunStatus.FAILED, *transitions.RERUNNABLE)
        )
        chosen = JobRun.objects.select_related("job").filter(
            job=job, scheduled_for__gt=start, scheduled_for__lte=end, status__in=ended
        )
        if reprocess == "all":
            chosen = chosen.exclude(~Q(status=RunStatus.FAILED) & Q(piece_count__gt=0))
        again = tuple(chosen.order_by("scheduled_for")[: BACKFILL_LIMIT + 1])
        if len(again) > BACKFILL_LIMIT:
            again, truncated = again[:BACKFILL_LIMIT], True
    return BackfillPlan(slots=new, existing=len(taken), truncated=truncated, again=again)


# A backfill's runs wait their turn one after another, in slot order, unless the operator
# says otherwise.
BACKFILL_POLICY = OverlapPolicy.BUFFER_ALL.value


def backfill(
    job: JobDefinition,
    start: datetime,
    end: datetime,
    *,
    by: str = "admin",
    overlap_policy: str | None = None,
    reprocess: str = "none",
) -> list[JobRun]:
    """Record and publish ``backfill`` runs for the range's missing slots, through the overlap
    policy ``overlap_policy`` — by default ``buffer_all``: the first runs now (if nothing of
    the job's backfill runs), the rest wait and run one at a time in slot order. With
    ``reprocess``, the range's runs it names run again too, each as its next attempt (failed
    ones as a retry does); returned after the new ones."""
    policy = overlap_override(job, overlap_policy) or BACKFILL_POLICY
    plan = plan_backfill(job, start, end, reprocess)
    if plan.truncated:
        raise ActionRefused(
            f"The range holds more than {BACKFILL_LIMIT:,} slots without a run, or runs to "
            "reprocess; narrow it."
        )
    counts = _activity(job)
    decided = [
        dispatchable_run(job, slot, RunTrigger.BACKFILL, counts, node=by, policy=policy)
        for slot in plan.slots
    ]
    _recorded(job, decided, policy)
    if any(decision.stop_others for _run, decision in decided):
        buffer.release([job.pk], now=database_now())
    rows = [run for run, _ in decided]
    created = list(JobRun.objects.filter(job=job, task_id__in=[r.task_id for r in rows]))
    publish(created)
    again = []
    for run in plan.again:
        if run.status == RunStatus.FAILED and run.piece_count:
            again.append(retry_pieces(run))
        elif transitions.retried(run) or transitions.rerun(run):
            run.refresh_from_db()
            again.append(run)
    publish(again)
    for run in again:
        run.refresh_from_db()
    record_change(
        job,
        "backfill",
        note=f"{len(rows)} slots in ({start:%Y-%m-%d %H:%M:%S %Z}, {end:%Y-%m-%d %H:%M:%S %Z}]"
        + (f", {len(again)} runs again ({reprocess})" if again else ""),
    )
    logger.info("run.backfill job=%s slots=%s again=%s by=%s", job.pk, len(rows), len(again), by)
    return created + again


def retry(run: JobRun) -> JobRun:
    """Run a failed run again: the same run, the next attempt (a run split into pieces: its
    failed pieces, :func:`retry_pieces`)."""
    if run.piece_count:
        return retry_pieces(run)
    if not transitions.retried(run):
        raise ActionRefused(f"Run {run.pk} is {run.status}, not failed: only failed runs retry.")
    run.refresh_from_db()
    publish([run])
    run.refresh_from_db()
    record_change(run.job, "retry", note=f"run {run.pk}: attempt {run.attempt} ({run.status})")
    return run


def retry_pieces(run: JobRun, indexes: list[int] | None = None) -> JobRun:
    """Send failed pieces of a run split into pieces again (``indexes``: those; None: every
    failed one), each as its next attempt, within the job's parallel cap; a failed run is
    re-opened (``running``) and closes again when they have ended, its completion task sent
    again then. Written to the job's trail."""
    if not run.piece_count:
        raise ActionRefused(f"Run {run.pk} has no pieces: retry the run itself.")
    reopened = piece_moves.retry_pieces(run, indexes)
    if not reopened:
        which = "failed pieces" if indexes is None else f"failed pieces among {sorted(indexes)}"
        raise ActionRefused(f"Run {run.pk} has no {which} to retry.")
    shown = "every failed piece" if indexes is None else f"pieces {sorted(indexes)}"
    record_change(run.job, "retry_pieces", note=f"run {run.pk}: {shown} ({reopened} sent again)")
    settle_pieces(run)
    run.refresh_from_db()
    return run


def settle_pieces(run: JobRun) -> None:
    """Settle a run split into pieces now (cancel, release, close), send what that makes."""
    settled = dispatch.settle_pieces(default_dispatcher(), run.pk)
    metrics.get().piece_outcome(run.job.name, "cancelled", settled.cancelled)


def cancel(run: JobRun, *, reason: str = "cancelled by an operator", by: str = "") -> JobRun:
    """Cancel a run. One that waits (pending, queued, retrying) is cancelled at once. One that
    runs is asked to stop (who: ``by``; why: ``reason``): its body sees the cancel at its next
    heartbeat (``current_run().cancel_requested``, or ``RunCancelled`` raised in it where its
    job has ``cancel_interrupts``), and however it then ends it is recorded ``cancelled``;
    :func:`cancel_outlook` says what follows. Refused for a run that has ended, or whose cancel
    was already asked for."""
    if transitions.cancelled(run, reason):
        run.refresh_from_db()
        metrics.get().not_run(run.job.name, "cancelled")  # a running one: counted at its end
        record_change(run.job, "cancel", note=f"run {run.pk}: {reason}")
        return run
    if transitions.cancel_requested(run, by=by or "an operator", reason=reason):
        logger.warning("run.cancel_requested run=%s job=%s by=%s", run.pk, run.job_id, by)
        if run.piece_count:  # its pieces not started are cancelled, the running ones stop
            settle_pieces(run)
        run.refresh_from_db()
        record_change(run.job, "cancel", note=f"run {run.pk} asked to stop: {reason}")
        return run
    run.refresh_from_db()
    if run.cancel_requested:
        raise ActionRefused(
            f"Run {run.pk} was already asked to stop, by {run.cancel_requested_by} at "
            f"{run.cancel_requested_at:%Y-%m-%d %H:%M:%S} UTC; it is {run.status}."
        )
    raise ActionRefused(
        f"Run {run.pk} is {run.status}: only a waiting or running run can be cancelled."
    )


def cancel_outlook(run: JobRun) -> str:
    """What follows a cancel, in an operator's words (for the admin's message)."""
    if run.status == RunStatus.CANCELLED:
        return f"Run {run.pk} is cancelled: it had not started."
    interval = app_settings.RUN_HEARTBEAT_INTERVAL
    job = run.job
    how = "RunCancelled is raised in it" if job.cancel_interrupts else "current_run() says so"
    text = (
        f"Run {run.pk} was asked to stop: its body sees it within {interval:g} s (its next "
        f"heartbeat; {how}), and it is recorded cancelled when it ends."
    )
    if job.cancel_grace is None:
        return f"{text} It is not terminated if it goes on (its job sets no cancel grace)."
    refusal = terminate_refusal(run.worker_pool)
    if refusal:
        return f"{text} It cannot be terminated after its grace: {refusal}."
    return f"{text} If it goes on {job.cancel_grace} s, it is terminated."
