"""After the database lost writes: each slot of the uncertain window decided by its job's choice.

A new leader that finds the leader row behind what it saw
(:mod:`django_cluster_cron.core.uncertain`) cannot know the fate of the slots of the window: a run
of one may have been recorded, sent and finished in the seconds the server lost. Before it
dispatches anything, in one fenced transaction, per enabled job and by its ``on_uncertain``:

Only the slots after a job's watermark (as the server kept it) are in doubt: up to it, every slot
was decided by writes the server has.

* ``skip`` (at most once): each slot of the window without a row gets one, ``uncertain``; a run
  still waiting up to the window's end, or running in it (its row went back: claimed, run or
  finished in the lost seconds, for all the ledger knows), becomes ``uncertain`` too. None of
  them runs.
* ``run`` (at least once): each slot without a row is recorded ``pending`` with the trigger
  ``uncertain`` and sent (the leader's take-over sends it); the runs found waiting or running
  take the trigger ``uncertain`` too and go on as any other (sent again by the outbox, a lost
  worker's run retried): a slot that runs twice is one the ledger says may.

Operator-made runs (``manual``, ``backfill``) are left as they are. The rows say why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q

from ..core.errors import ScheduleError
from ..core.uncertain import WentBack
from ..models import (
    EXECUTING_STATUSES,
    JobDefinition,
    JobRun,
    RunStatus,
    RunTrigger,
    UncertainPolicy,
)
from ..models.runs import SCHEDULED_TRIGGERS, WAITING_STATUSES
from .fastinsert import insert_ignoring_conflicts
from .fence import Fence
from .rows import ROW_FIELDS, run_row

logger = logging.getLogger("django_cluster_cron.scheduler")

# A window this many slots long for one job is a schedule far denser than any window the lease
# TTL and the look-ahead make: its first slots are decided, the rest left to catch-up.
SLOTS_PER_JOB = 10_000


@dataclass
class Settled:
    """What the window's slots became: recorded uncertain (skip), recorded to run (run), runs
    found waiting that became uncertain (skip) or go on said to be uncertain (run)."""

    start: datetime | None = None
    end: datetime | None = None
    skipped: int = 0
    run: int = 0
    withdrawn: int = 0
    again: int = 0


def settle_uncertain(
    went: WentBack,
    *,
    fence: Fence,
    now: datetime,
    node_id: str,
    ttl: timedelta,
    lookahead: timedelta,
) -> Settled:
    """Decide every slot of ``went``'s window (see the module doc)."""
    start, end = went.window(ttl=ttl, lookahead=lookahead, now=now)
    settled = Settled(start, end)
    if end <= start:
        return settled
    span = f"{start:%Y-%m-%d %H:%M:%S}Z-{end:%H:%M:%S}Z"
    skip_reason = f"uncertain: {went.cause()}; the slot may have run ({span}): not run again"
    run_reason = f"uncertain: {went.cause()}; the slot may have run ({span}): run again"
    in_window = {"scheduled_for__gt": start, "scheduled_for__lte": end}
    with fence.transaction(now):
        recorded = set(JobRun.objects.filter(**in_window).values_list("job_id", "scheduled_for"))
        rows = []
        for job in JobDefinition.objects.filter(enabled=True):
            skip = job.on_uncertain != UncertainPolicy.RUN
            try:
                schedule, timing = job.schedule, job.timing()
                # Up to its watermark as the server kept it, the job's slots were decided by
                # writes the server has (a slot without a row there was never to run).
                decided = job.last_scheduled_at or job.created_at
                slots = timing.slots_after(schedule, max(start, decided))
                for _ in range(SLOTS_PER_JOB):
                    slot = next(slots, None)
                    if slot is None or slot > end:
                        break
                    if (job.pk, slot) in recorded:
                        continue
                    if skip:
                        status, trigger, reason = (
                            RunStatus.UNCERTAIN,
                            RunTrigger.SCHEDULE,
                            skip_reason,
                        )
                        settled.skipped += 1
                    else:
                        status, trigger, reason = (
                            RunStatus.PENDING,
                            RunTrigger.UNCERTAIN,
                            run_reason,
                        )
                        settled.run += 1
                    rows.append(run_row(job, slot, trigger, status, reason, timing.due_at(slot)))
            except (ScheduleError, ValueError):
                continue  # a bad row: the leader's pass reports it as it does any other
        constants = {"dispatched_by": node_id, "epoch": fence.epoch}
        insert_ignoring_conflicts(JobRun, ROW_FIELDS, rows, constants, now=now)
        # A run still waiting where the server kept it may have been claimed, run and recorded
        # in the lost seconds however old it is; one running may have finished in them.
        waiting = Q(status__in=WAITING_STATUSES) | Q(status__in=EXECUTING_STATUSES, **in_window)
        doubtful = JobRun.objects.filter(
            waiting, scheduled_for__lte=end, trigger__in=SCHEDULED_TRIGGERS
        )
        settled.withdrawn = doubtful.filter(job__on_uncertain=UncertainPolicy.SKIP).update(
            status=RunStatus.UNCERTAIN, reason=skip_reason[:255], finished_at=now
        )
        # run: they go on (sent again, or their lost worker's run retried), said to be uncertain.
        settled.again = doubtful.filter(job__on_uncertain=UncertainPolicy.RUN).update(
            trigger=RunTrigger.UNCERTAIN, reason=run_reason[:255]
        )
    return settled
