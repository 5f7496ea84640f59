"""Catch-up planning: which due slots of one job to run and which to record as missed.

Pure: the caller passes ``now`` and the job's watermark; nothing here reads a clock or a database.

The watermark (``JobDefinition.last_scheduled_at``) means "every slot at or before this instant
has been decided". Slots due now are those in ``(watermark, now]``; only the ones inside the
catch-up window ``(now - window, now]`` may run (``from = max(last_scheduled_at, now -
catchup_window)``, docs/explanation/scheduler.md). The policy picks among them:

* ``all``    — run every slot in the window, at most ``cap`` (the most recent ones);
* ``latest`` — run the most recent slot only;
* ``none``   — run only slots that are on time (``now - slot <= grace``), at most ``cap``.

Every other due slot is *missed*. The most recent ``missed_record_limit`` of them are returned one
by one (the caller records a ``missed`` JobRun for each); older ones are summarised in a single
:class:`UnrecordedMisses` so a long outage of an every-second job cannot explode the ledger.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from .errors import ScheduleError
from .kinds import Schedule
from .timing import SlotTiming

PLAIN = SlotTiming()


class CatchupPolicy(str, enum.Enum):
    ALL = "all"
    LATEST = "latest"
    NONE = "none"


class Trigger(str, enum.Enum):
    SCHEDULE = "schedule"  # on time: within ``grace`` of its slot
    CATCHUP = "catchup"  # late: dispatched after a scheduler outage or stall


# The longest catch-up window: a century (a longer one only names instants before the year 1).
MAX_WINDOW = timedelta(days=36_525)


@dataclass(frozen=True)
class CatchupRules:
    policy: CatchupPolicy
    window: timedelta
    cap: int
    grace: timedelta
    missed_record_limit: int

    def __post_init__(self) -> None:
        # Accept the plain string a model field holds; store the enum member.
        object.__setattr__(self, "policy", parse_policy(self.policy))
        if self.window <= timedelta(0):
            raise ScheduleError(
                "catchup_window", f"catch-up window must be positive: {self.window}."
            )
        if self.window > MAX_WINDOW:
            raise ScheduleError(
                "catchup_window",
                f"catch-up window {self.window} is longer than a century ({MAX_WINDOW.days} days).",
            )
        if self.grace < timedelta(0):
            raise ScheduleError("catchup_grace", f"grace must not be negative: {self.grace}.")
        if self.cap < 1:
            raise ScheduleError("catchup_cap", f"catch-up cap must be at least 1, got {self.cap}.")
        if self.missed_record_limit < 0:
            raise ScheduleError(
                "missed_record_limit",
                f"missed record limit must be >= 0, got {self.missed_record_limit}.",
            )


def parse_policy(value: object) -> CatchupPolicy:
    try:
        return CatchupPolicy(value)
    except ValueError:
        choices = ", ".join(p.value for p in CatchupPolicy)
        raise ScheduleError(
            "catchup_policy", f"Unknown catch-up policy {value!r}; choose one of: {choices}."
        ) from None


@dataclass(frozen=True)
class PlannedRun:
    slot: datetime
    trigger: Trigger
    due: datetime | None = None  # the slot plus its jitter; None: the slot itself

    @property
    def due_at(self) -> datetime:
        return self.slot if self.due is None else self.due


@dataclass(frozen=True)
class UnrecordedMisses:
    """Due slots in ``(after, until]`` that were missed and are not recorded one by one.

    ``count`` is exact when known; ``None`` when the range reaches back beyond the catch-up
    window (those slots are not even enumerated — that is the point of a window).
    """

    after: datetime
    until: datetime
    count: int | None


@dataclass(frozen=True)
class SlotPlan:
    runs: tuple[PlannedRun, ...]  # oldest first
    missed: tuple[datetime, ...]  # oldest first, each to be recorded as a ``missed`` run
    unrecorded: UnrecordedMisses | None
    watermark: datetime  # the new ``last_scheduled_at``
    next_run_at: datetime | None  # first slot after ``now``

    @property
    def is_empty(self) -> bool:
        return not self.runs and not self.missed and self.unrecorded is None


def plan_slots(
    schedule: Schedule,
    *,
    last_scheduled_at: datetime,
    now: datetime,
    rules: CatchupRules,
    timing: SlotTiming = PLAIN,
) -> SlotPlan:
    """Decide the fate of every slot of ``schedule`` due in ``(last_scheduled_at, now]``.

    "Due" is the slot plus its jitter offset (``timing``; none by default) and only slots inside
    the job's active period exist. Lateness, the window and the watermark are all measured in due
    time, so a jittered slot is on time when it is dispatched at its due time.
    """
    if now <= last_scheduled_at:
        # Every slot due by the watermark is decided (it may lie ahead of now: recorded ahead).
        next_due = timing.next_due_after(schedule, last_scheduled_at)
        return SlotPlan((), (), None, last_scheduled_at, next_due)

    window_start = now - rules.window
    lower = max(last_scheduled_at, window_start)
    unrecorded: UnrecordedMisses | None = None
    if lower > last_scheduled_at:
        # Slots due before the window (an outage longer than it) are not even enumerated.
        for slot, due in timing.due_after(schedule, last_scheduled_at):
            if due <= lower:
                unrecorded = UnrecordedMisses(last_scheduled_at, lower, None)
                break
            if slot > lower:
                break

    keep = rules.cap if rules.policy is not CatchupPolicy.LATEST else 1
    keep += rules.missed_record_limit
    tail: deque[tuple[datetime, datetime]] = deque(maxlen=keep)
    dropped = 0
    last_dropped: datetime | None = None
    next_run_at: datetime | None = None
    for slot, due in timing.due_after(schedule, lower):
        if slot > now:
            # Every later slot is due after this one's slot, so none of them can be earlier
            # than the best found once we pass it.
            if next_run_at is None or due < next_run_at:
                next_run_at = due
            if slot >= next_run_at:
                break
            continue
        if due > now:
            if next_run_at is None or due < next_run_at:
                next_run_at = due
            continue
        if len(tail) == keep:
            dropped += 1
            last_dropped = tail[0][0]
        tail.append((slot, due))

    if last_dropped is not None:
        if unrecorded is None:
            unrecorded = UnrecordedMisses(lower, last_dropped, dropped)
        else:  # merge: the outside-window part has no count, so neither has the whole
            unrecorded = UnrecordedMisses(unrecorded.after, last_dropped, None)

    due_slots = list(tail)
    if rules.policy is CatchupPolicy.ALL:
        to_run = due_slots[-rules.cap :]
    elif rules.policy is CatchupPolicy.LATEST:
        to_run = due_slots[-1:]
    else:
        to_run = [pair for pair in due_slots if now - pair[1] <= rules.grace][-rules.cap :]
    chosen = {slot for slot, _ in to_run}
    missed = [slot for slot, _ in due_slots if slot not in chosen]
    if len(missed) > rules.missed_record_limit:
        # Only possible for ``none``: its runs can be fewer than ``cap``.
        excess = missed[: len(missed) - rules.missed_record_limit]
        missed = missed[len(excess) :]
        if unrecorded is None:
            unrecorded = UnrecordedMisses(lower, excess[-1], dropped + len(excess))
        else:
            count = None if unrecorded.count is None else unrecorded.count + len(excess)
            unrecorded = UnrecordedMisses(unrecorded.after, excess[-1], count)

    runs = tuple(
        PlannedRun(slot, Trigger.SCHEDULE if now - due <= rules.grace else Trigger.CATCHUP, due)
        for slot, due in to_run
    )
    return SlotPlan(runs, tuple(missed), unrecorded, now, next_run_at)


class LateVerdict(str, enum.Enum):
    """What becomes of a run recorded for its slot but not sent at its time, once found late."""

    ON_TIME = "on_time"  # within the grace: it goes as recorded
    CATCH_UP = "catch_up"  # the policy runs it late: it goes as a catch-up run
    MISSED_POLICY = "missed_policy"  # the policy does not run it late
    MISSED_WINDOW = "missed_window"  # it fell out of the catch-up window


def judge_unsent(
    schedule: Schedule,
    *,
    slot: datetime,
    due: datetime,
    now: datetime,
    rules: CatchupRules,
    timing: SlotTiming = PLAIN,
) -> LateVerdict:
    """The fate of a run recorded for ``slot`` (due at ``due``) that nobody sent at its time —
    recorded ahead of it, then every scheduler stopped — found at ``now``, by the rules
    :func:`plan_slots` applies to any late slot:

    * within ``grace`` of its due time it is still on time;
    * older than the catch-up window, it is missed whatever the policy;
    * ``none`` runs no late slot; ``latest`` runs it only if no later slot of the schedule is
      due by ``now`` (else that one is the newest, and this one is missed); ``all`` runs it
      unless ``cap`` later slots are due by ``now`` (it is not among the newest ``cap``).
    """
    late = now - due
    if late <= rules.grace:
        return LateVerdict.ON_TIME
    if late >= rules.window:
        return LateVerdict.MISSED_WINDOW
    if rules.policy is CatchupPolicy.NONE:
        return LateVerdict.MISSED_POLICY
    newer = 1 if rules.policy is CatchupPolicy.LATEST else rules.cap
    for later_slot, later in timing.due_after(schedule, due):
        if later_slot > now:
            break
        if later <= now:
            newer -= 1
            if newer == 0:
                return LateVerdict.MISSED_POLICY
    return LateVerdict.CATCH_UP
