"""Operator actions: run now, backfill, retry, cancel, pause and resume.

The admin (and any code of yours) calls these. They write the ledger like the scheduler does —
one row per (job, slot), the overlap policy applied, the row recorded before it is published —
but they are operator writes, not leader writes, so they carry no fencing epoch. A run whose
publish fails stays ``pending`` and the leader's outbox sends it later.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction

from .dbtime import database_now
from .dispatch import default_dispatcher, send_runs
from .ledger.outbox import OutboxMessage
from .ledger.rows import activity, dispatchable_run
from .ledger.transitions import cancel_waiting, retry_failed
from .models import JobDefinition, JobRun, RunStatus, RunTrigger
from .models.changes import record_change

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
    sent = send_runs(default_dispatcher(), messages, now=database_now())
    if sent.failure is not None:
        logger.error("operations.publish_failed error=%s (the outbox will retry)", sent.failure)
    return len(sent.messages)


def run_now(job: JobDefinition, *, by: str = "admin") -> JobRun:
    """Record and publish a ``manual`` run of ``job`` for now; its schedule does not move."""
    counts = _activity(job)
    now = database_now()
    try:
        with transaction.atomic():
            run = dispatchable_run(job, now, RunTrigger.MANUAL, counts, node=by)
            run.save()
    except IntegrityError:
        raise ActionRefused("A run for this very instant already exists; try again.") from None
    publish([run])
    run.refresh_from_db()
    record_change(job, "run_now", note=f"run {run.pk} ({run.status})")
    logger.info("run.manual job=%s run=%s status=%s by=%s", job.pk, run.pk, run.status, by)
    return run


@dataclass(frozen=True)
class BackfillPlan:
    slots: list[datetime]  # slots in the range that have no run yet
    existing: int  # slots in the range that already have a run (left alone)
    truncated: bool  # the range holds more than BACKFILL_LIMIT new slots


def plan_backfill(job: JobDefinition, start: datetime, end: datetime) -> BackfillPlan:
    """The slots of ``job`` in ``(start, end]`` a backfill would create (bounded)."""
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
    return BackfillPlan(slots=new, existing=len(taken), truncated=truncated)


def backfill(
    job: JobDefinition, start: datetime, end: datetime, *, by: str = "admin"
) -> list[JobRun]:
    """Record and publish ``backfill`` runs for the range's missing slots, through the overlap
    policy (with ``skip``, only the first slot runs while it is active; the rest are skipped)."""
    plan = plan_backfill(job, start, end)
    if plan.truncated:
        raise ActionRefused(
            f"The range holds more than {BACKFILL_LIMIT:,} slots without a run; narrow it."
        )
    counts = _activity(job)
    rows = [
        dispatchable_run(job, slot, RunTrigger.BACKFILL, counts, node=by) for slot in plan.slots
    ]
    with transaction.atomic():
        JobRun.objects.bulk_create(rows, ignore_conflicts=True)
    created = list(JobRun.objects.filter(job=job, task_id__in=[r.task_id for r in rows]))
    publish(created)
    record_change(
        job,
        "backfill",
        note=f"{len(rows)} slots in ({start:%Y-%m-%d %H:%M:%S %Z}, {end:%Y-%m-%d %H:%M:%S %Z}]",
    )
    logger.info("run.backfill job=%s slots=%s by=%s", job.pk, len(rows), by)
    return created


def retry(run: JobRun) -> JobRun:
    """Run a failed run again: the same run, the next attempt."""
    if not retry_failed(run):
        raise ActionRefused(f"Run {run.pk} is {run.status}, not failed: only failed runs retry.")
    run.refresh_from_db()
    publish([run])
    run.refresh_from_db()
    return run


def cancel(run: JobRun, *, reason: str = "cancelled by an operator") -> JobRun:
    """Cancel a run that has not started (pending, queued or waiting for a retry)."""
    if not cancel_waiting(run, reason):
        raise ActionRefused(f"Run {run.pk} is {run.status}: only waiting runs can be cancelled.")
    run.refresh_from_db()
    return run
