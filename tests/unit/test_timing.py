"""The pure core of a job's active period and jitter (core/timing.py), and the planner using it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_cluster_cron.core.catchup import CatchupPolicy, CatchupRules, Trigger, plan_slots
from django_cluster_cron.core.cron import CronSchedule
from django_cluster_cron.core.errors import ScheduleError
from django_cluster_cron.core.timing import SlotTiming, jitter_offset
from tests.support.processes import printed_in_processes

UTC = timezone.utc
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
HOURLY = CronSchedule.parse("0 * * * *", "UTC")
EVERY_MINUTE = CronSchedule.parse("* * * * *", "UTC")


def rules(
    policy=CatchupPolicy.ALL, window=timedelta(hours=6), cap=100, grace=timedelta(seconds=30)
):
    return CatchupRules(policy, window, cap, grace, missed_record_limit=100)


# -- jitter offsets -------------------------------------------------------------------------------


def test_an_offset_is_whole_seconds_inside_the_bound_and_zero_without_jitter():
    jitter = timedelta(seconds=300)
    offsets = {jitter_offset(job, T0, jitter) for job in range(2000)}
    assert all(timedelta(0) <= o <= jitter and o.microseconds == 0 for o in offsets)
    assert jitter_offset(7, T0, timedelta(0)) == timedelta(0)


def test_offsets_spread_ten_thousand_jobs_on_one_cron_across_the_window():
    """The point of jitter: `0 * * * *` on many jobs no longer fires at one instant."""
    jitter = timedelta(seconds=600)
    seconds = [int(jitter_offset(job, T0, jitter).total_seconds()) for job in range(10_000)]
    per_minute = [0] * 11
    for value in seconds:
        per_minute[value // 60] += 1
    assert len(set(seconds)) > 550  # of 601 possible offsets
    # Ten full minutes hold ~1,000 each; none gets more than a fair share and a margin.
    assert max(per_minute[:10]) < 1_150
    assert min(per_minute[:10]) > 850


def test_the_offset_depends_on_the_job_and_the_slot_not_on_the_slots_zone():
    jitter = timedelta(seconds=3600)
    berlin = T0.astimezone(CronSchedule.parse("* * * * *", "Europe/Berlin").zone)
    assert jitter_offset(1, T0, jitter) == jitter_offset(1, berlin, jitter)
    by_job = {jitter_offset(job, T0, jitter) for job in range(50)}
    by_slot = {jitter_offset(1, T0 + timedelta(hours=h), jitter) for h in range(50)}
    assert len(by_job) > 40
    assert len(by_slot) > 40


def test_every_process_computes_the_same_offsets_whatever_its_hash_seed():
    """Every scheduler host must agree: the offset is a pure function, not Python's hash()."""
    code = (
        "from datetime import datetime, timedelta, timezone\n"
        "from django_cluster_cron.core.timing import jitter_offset\n"
        "t = datetime(2030, 1, 1, 12, tzinfo=timezone.utc)\n"
        "print([int(jitter_offset(j, t + timedelta(minutes=j), timedelta(seconds=900))"
        ".total_seconds()) for j in range(200)])\n"
    )
    outputs = printed_in_processes(code)
    here = str(
        [
            int(jitter_offset(j, T0 + timedelta(minutes=j), timedelta(seconds=900)).total_seconds())
            for j in range(200)
        ]
    )
    assert outputs == {here + "\n"}


def test_negative_jitter_and_an_end_before_the_start_are_refused():
    with pytest.raises(ScheduleError, match="jitter"):
        SlotTiming(jitter=timedelta(seconds=-1))
    with pytest.raises(ScheduleError, match="before the start"):
        SlotTiming(start_at=T0, end_at=T0 - timedelta(hours=1))


# -- the active period -----------------------------------------------------------------------------


def test_slots_start_at_the_start_inclusive_and_stop_at_the_end_inclusive():
    timing = SlotTiming(start_at=T0 + timedelta(hours=2), end_at=T0 + timedelta(hours=4))
    slots = list(timing.slots_after(HOURLY, T0 - timedelta(days=1)))
    assert slots == [T0 + timedelta(hours=h) for h in (2, 3, 4)]


def test_the_planner_owes_nothing_before_the_start_and_finishes_at_the_end():
    timing = SlotTiming(start_at=T0 + timedelta(hours=1), end_at=T0 + timedelta(hours=2))
    before = plan_slots(
        HOURLY,
        last_scheduled_at=T0 - timedelta(hours=5),
        now=T0 + timedelta(minutes=30),
        rules=rules(),
        timing=timing,
    )
    assert before.runs == ()
    assert before.missed == ()
    assert before.unrecorded is None
    assert before.next_run_at == T0 + timedelta(hours=1)
    last = plan_slots(
        HOURLY,
        last_scheduled_at=T0 + timedelta(hours=1, minutes=30),
        now=T0 + timedelta(hours=2),
        rules=rules(),
        timing=timing,
    )
    assert [r.slot for r in last.runs] == [T0 + timedelta(hours=2)]
    assert last.next_run_at is None  # finished: the due index never returns it again
    assert timing.has_ended(T0 + timedelta(hours=2, seconds=1))


# -- jitter in the planner -------------------------------------------------------------------------


def test_a_jittered_slot_is_not_run_before_its_due_time_and_keeps_its_slot():
    timing = SlotTiming(jitter=timedelta(seconds=1800), key=42)
    slot = T0 + timedelta(hours=1)
    offset = timing.offset(slot)
    assert offset > timedelta(0)  # (job 42 at this slot; pinned so the test means something)
    early = plan_slots(
        HOURLY,
        last_scheduled_at=T0 + timedelta(minutes=30),
        now=slot + offset - timedelta(seconds=1),
        rules=rules(),
        timing=timing,
    )
    assert early.runs == ()
    assert early.next_run_at == slot + offset
    due = plan_slots(
        HOURLY, last_scheduled_at=early.watermark, now=slot + offset, rules=rules(), timing=timing
    )
    assert [(r.slot, r.trigger) for r in due.runs] == [(slot, Trigger.SCHEDULE)]


@settings(max_examples=150, deadline=None)
@given(
    jitter=st.integers(min_value=0, max_value=300),
    key=st.integers(min_value=0, max_value=10**6),
    steps=st.lists(st.integers(min_value=1, max_value=200), min_size=5, max_size=60),
)
def test_ticking_through_time_runs_every_slot_once_never_before_it_is_due(jitter, key, steps):
    """Whatever the tick spacing (jitter may exceed the one-minute gap between slots), a tick
    loop like the leader's runs each slot exactly once, at or after its due time, on time."""
    timing = SlotTiming(jitter=timedelta(seconds=jitter), key=key)
    watermark = now = T0
    ran: list[datetime] = []
    for step in steps:
        now += timedelta(seconds=step)
        plan = plan_slots(
            EVERY_MINUTE,
            last_scheduled_at=watermark,
            now=now,
            rules=rules(grace=timedelta(seconds=10**6)),
            timing=timing,
        )
        assert plan.missed == ()
        for run in plan.runs:
            assert timing.due_at(run.slot) <= now
            ran.append(run.slot)
        watermark = plan.watermark
        assert plan.next_run_at is not None
        assert plan.next_run_at > now
    expected = []
    for slot in timing.slots_after(EVERY_MINUTE, T0 - timedelta(seconds=jitter)):
        if slot > now:  # due at or after itself: no later slot is due by ``now``
            break
        if T0 < timing.due_at(slot) <= now:
            expected.append(slot)
    assert sorted(ran) == sorted(expected)
    assert len(ran) == len(set(ran))


@settings(max_examples=100, deadline=None)
@given(
    jitter=st.integers(min_value=0, max_value=600),
    key=st.integers(min_value=0, max_value=10**6),
    minutes=st.integers(min_value=0, max_value=600),
)
def test_the_preview_lists_the_next_runs_in_due_order(jitter, key, minutes):
    timing = SlotTiming(jitter=timedelta(seconds=jitter), key=key)
    after = T0 + timedelta(minutes=minutes, seconds=17)
    upcoming = timing.upcoming(EVERY_MINUTE, after, 10)
    brute = sorted(
        (
            (s, timing.due_at(s))
            for s in EVERY_MINUTE.fire_times(after - timedelta(hours=1), 200)
            if timing.due_at(s) > after
        ),
        key=lambda pair: pair[1],
    )[:10]
    assert [due for _, due in upcoming] == [due for _, due in brute]
    assert upcoming[0][1] == timing.next_due_after(EVERY_MINUTE, after)
