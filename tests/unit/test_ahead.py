"""Recording ahead (core/ahead.py): which instant of a job is recorded before it is due."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from django_cluster_cron.core.ahead import plan_ahead
from django_cluster_cron.core.catchup import CatchupPolicy, CatchupRules, Trigger, plan_slots
from django_cluster_cron.core.cron import CronSchedule
from django_cluster_cron.core.timing import SlotTiming

UTC = timezone.utc
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
RULES = CatchupRules(CatchupPolicy.ALL, timedelta(hours=1), 1000, timedelta(seconds=30), 1000)


def sec(n: float) -> timedelta:
    return timedelta(seconds=n)


PLAIN = SlotTiming()


def both(schedule, last, now, horizon, timing=PLAIN):
    plan = plan_slots(schedule, last_scheduled_at=last, now=now, rules=RULES, timing=timing)
    return plan, plan_ahead(schedule, plan=plan, horizon=horizon, timing=timing)


def test_the_next_instant_inside_the_horizon_is_recorded_and_the_watermark_moves_to_it():
    minutely = CronSchedule.parse("* * * * *", "UTC")
    plan, ahead = both(minutely, T0, now=T0 + sec(50), horizon=T0 + sec(65))
    assert plan.runs == ()
    assert ahead is not None
    assert [(r.slot, r.trigger, r.due_at) for r in ahead.runs] == [
        (T0 + sec(60), Trigger.SCHEDULE, T0 + sec(60))
    ]
    assert ahead.watermark == T0 + sec(60)
    assert ahead.next_run_at == T0 + sec(120)


def test_an_instant_beyond_the_horizon_waits():
    minutely = CronSchedule.parse("* * * * *", "UTC")
    _plan, ahead = both(minutely, T0, now=T0 + sec(30), horizon=T0 + sec(59))
    assert ahead is None


def test_a_watermark_already_ahead_of_now_gives_the_instant_after_it():
    """A job with an instant recorded ahead gets the next one, never the same one again."""
    every_second = CronSchedule.parse("* * * * * *", "UTC")
    plan, ahead = both(every_second, T0 + sec(3), now=T0 + sec(1), horizon=T0 + sec(10))
    assert plan.runs == ()
    assert plan.watermark == T0 + sec(3)
    assert plan.next_run_at == T0 + sec(4)
    assert ahead is not None
    assert [r.slot for r in ahead.runs] == [T0 + sec(4)]


def test_due_slots_are_planned_first_and_the_instant_ahead_follows():
    every_ten = CronSchedule.parse("* * * * * */10", "UTC")
    plan, ahead = both(every_ten, T0, now=T0 + sec(25), horizon=T0 + sec(31))
    assert [r.slot for r in plan.runs] == [T0 + sec(10), T0 + sec(20)]
    assert ahead is not None
    assert [r.slot for r in ahead.runs] == [T0 + sec(30)]
    assert ahead.next_run_at == T0 + sec(40)


def test_a_jittered_slot_is_recorded_for_its_due_time_and_keeps_its_slot():
    hourly = CronSchedule.parse("0 * * * *", "UTC")
    timing = SlotTiming(jitter=sec(600), key=42)
    slot = T0 + timedelta(hours=1)
    due = timing.due_at(slot)
    assert due > slot  # this key's offset is not zero
    _plan, early = both(hourly, T0, now=slot - sec(1), horizon=slot + sec(5), timing=timing)
    assert early is None or early.runs[0].due_at <= slot + sec(5)
    _plan, ahead = both(hourly, T0, now=due - sec(5), horizon=due + sec(1), timing=timing)
    assert ahead is not None
    assert [(r.slot, r.due_at) for r in ahead.runs] == [(slot, due)]
    assert ahead.watermark == due


def test_no_instant_after_the_end_of_the_active_period():
    minutely = CronSchedule.parse("* * * * *", "UTC")
    timing = SlotTiming(end_at=T0 + sec(30))
    _plan, ahead = both(minutely, T0, now=T0 + sec(10), horizon=T0 + sec(120), timing=timing)
    assert ahead is None


CRONS = ["* * * * * *", "* * * * * */7", "* * * * * 0,30", "* * * * *", "*/2 * * * *"]


def slots_due_by(schedule, timing, moment):
    """Brute force: every slot of the job due in (T0, moment], with its due time."""
    found = {}
    for slot, due in timing.due_after(schedule, T0):
        if slot > moment:  # a slot is never due before itself
            break
        if due <= moment:
            found[slot] = due
    return found


@settings(max_examples=150, deadline=None)
@given(
    cron=st.sampled_from(CRONS),
    jitter=st.sampled_from([0, 0, 3, 45]),
    key=st.integers(1, 10_000),
    horizon=st.sampled_from([0.0, 0.5, 2.0, 10.0, 75.0]),
    steps=st.lists(st.floats(0.05, 20.0), min_size=3, max_size=12),
)
def test_passes_ahead_and_on_time_decide_every_slot_once_and_in_time(
    cron, jitter, key, horizon, steps
):
    """The scheduler's passes at arbitrary moments, selecting the job as the due index does
    (``next_run_at`` due by now, or by the horizon with no instant recorded ahead yet): after
    each moment's passes, the slots recorded are exactly the job's slots due by now plus those
    of its first instant after now if it lies within the horizon (none lost, none twice) and
    ``next_run_at`` is the first due time not yet recorded."""
    schedule = CronSchedule.parse(cron, "UTC")
    timing = SlotTiming(jitter=sec(jitter), key=key)
    watermark = T0
    next_run_at = timing.next_due_after(schedule, T0)
    now = T0
    recorded: dict[datetime, datetime] = {}
    for step in steps:
        now += sec(step)
        limit = now + sec(horizon)
        while next_run_at is not None and (
            next_run_at <= now or (next_run_at <= limit and watermark <= now)
        ):
            plan = plan_slots(
                schedule, last_scheduled_at=watermark, now=now, rules=RULES, timing=timing
            )
            ahead = plan_ahead(schedule, plan=plan, horizon=limit, timing=timing)
            assert not plan.missed
            for run in [*plan.runs, *(ahead.runs if ahead else ())]:
                assert run.slot not in recorded, f"{run.slot} recorded twice"
                recorded[run.slot] = run.due_at
            watermark = ahead.watermark if ahead else plan.watermark
            next_run_at = ahead.next_run_at if ahead else plan.next_run_at
        expected = slots_due_by(schedule, timing, now)
        first = timing.next_due_after(schedule, now)
        if first is not None and first <= limit:
            expected |= {
                slot: due
                for slot, due in slots_due_by(schedule, timing, first).items()
                if due == first
            }
        assert recorded == expected
        later = [
            due
            for slot, due in slots_due_by(schedule, timing, limit + sec(200)).items()
            if slot not in recorded
        ]
        assert next_run_at == min(later, default=next_run_at)
