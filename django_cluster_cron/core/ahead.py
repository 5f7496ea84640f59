"""Recording ahead: a job's next due instant, recorded before it comes.

Pure: the caller passes the plan of what is due by now and the horizon. The scheduler records
the runs of slots due within a short horizon before they are due, so that at the instant it only
publishes messages it has already built (docs/explanation/scheduler.md).

Each call takes the job's next due instant if it lies within the horizon: every slot due at that
very time (normally one; two only when jitter lands two slots on the same second). It comes after
the catch-up plan has decided every slot due by ``now``, so the job's watermark keeps its meaning
— every slot due at or before it has been decided — and moves to that instant. A job has at most
one instant recorded ahead: the scheduler selects it again only once its watermark is past
(``JobQuerySet.due_by``), so a job firing every second has one run waiting, not a minute's worth.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .catchup import PlannedRun, SlotPlan, Trigger
from .kinds import Schedule
from .timing import SlotTiming


@dataclass(frozen=True)
class AheadPlan:
    runs: tuple[PlannedRun, ...]  # slot order, all due at ``watermark``
    watermark: datetime  # the instant recorded: the new ``last_scheduled_at``
    next_run_at: datetime | None  # the first due time after it


def plan_ahead(
    schedule: Schedule, *, plan: SlotPlan, horizon: datetime, timing: SlotTiming
) -> AheadPlan | None:
    """The runs to record ahead after ``plan`` (what is due by now), or None.

    None when the job's next due time (``plan.next_run_at``) lies beyond ``horizon``, or there
    is none. The slots due at that time are found by their due time, not their position: with
    jitter larger than the gap between slots, slots may come due out of order.
    """
    due = plan.next_run_at
    if due is None or due > horizon or due <= plan.watermark:
        return None
    slots = []
    for slot, slot_due in timing.due_after(schedule, plan.watermark):
        if slot > due:  # a slot is never due before itself: none later can be due at ``due``
            break
        if slot_due == due:
            slots.append(slot)
    if not slots:  # pragma: no cover - plan_slots found a slot due at that time
        return None
    runs = tuple(PlannedRun(slot, Trigger.SCHEDULE, due) for slot in slots)
    return AheadPlan(runs, due, timing.next_due_after(schedule, due))
