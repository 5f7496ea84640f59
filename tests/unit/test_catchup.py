"""The catch-up planner: policies, window, cap, grace and the bound on missed records."""

from datetime import datetime, timedelta, timezone
from itertools import takewhile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_cluster_cron.core.catchup import LateVerdict, judge_unsent
from django_cluster_cron.schedule import (
    CatchupRules,
    CronSchedule,
    ScheduleError,
    Trigger,
    plan_slots,
)

UTC = timezone.utc
T0 = datetime(2024, 6, 1, 12, tzinfo=UTC)
EVERY_MINUTE = CronSchedule.parse("* * * * *", "UTC")
EVERY_SECOND = CronSchedule.parse("* * * * * *", "UTC")


def rules(policy="all", window=3600, cap=10, grace=60, limit=100):
    return CatchupRules(policy, timedelta(seconds=window), cap, timedelta(seconds=grace), limit)


def minutes(*offsets):
    return tuple(T0 + timedelta(minutes=m) for m in offsets)


def test_an_on_time_slot_runs_with_trigger_schedule():
    plan = plan_slots(
        EVERY_MINUTE,
        last_scheduled_at=T0,
        now=T0 + timedelta(minutes=1, seconds=0.2),
        rules=rules(),
    )
    assert [(r.slot, r.trigger) for r in plan.runs] == [(minutes(1)[0], Trigger.SCHEDULE)]
    assert plan.missed == ()
    assert plan.unrecorded is None
    assert plan.watermark == T0 + timedelta(minutes=1, seconds=0.2)
    assert plan.next_run_at == minutes(2)[0]


def test_nothing_due_gives_an_empty_plan_with_the_next_run():
    plan = plan_slots(
        EVERY_MINUTE, last_scheduled_at=T0, now=T0 + timedelta(seconds=30), rules=rules()
    )
    assert plan.is_empty
    assert plan.next_run_at == minutes(1)[0]


def test_all_runs_every_missed_slot_in_the_window_as_catchup():
    now = T0 + timedelta(minutes=5)
    plan = plan_slots(EVERY_MINUTE, last_scheduled_at=T0, now=now, rules=rules("all", grace=0))
    assert tuple(r.slot for r in plan.runs) == minutes(1, 2, 3, 4, 5)
    assert [r.trigger for r in plan.runs] == [Trigger.CATCHUP] * 4 + [Trigger.SCHEDULE]
    assert plan.missed == ()


def test_all_is_capped_keeping_the_most_recent_slots():
    now = T0 + timedelta(minutes=5)
    plan = plan_slots(EVERY_MINUTE, last_scheduled_at=T0, now=now, rules=rules("all", cap=2))
    assert tuple(r.slot for r in plan.runs) == minutes(4, 5)
    assert plan.missed == minutes(1, 2, 3)


def test_latest_runs_only_the_most_recent_slot():
    now = T0 + timedelta(minutes=5, seconds=10)
    plan = plan_slots(EVERY_MINUTE, last_scheduled_at=T0, now=now, rules=rules("latest"))
    assert tuple(r.slot for r in plan.runs) == minutes(5)
    assert plan.missed == minutes(1, 2, 3, 4)


def test_none_runs_only_slots_within_grace():
    now = T0 + timedelta(minutes=5, seconds=30)
    plan = plan_slots(EVERY_MINUTE, last_scheduled_at=T0, now=now, rules=rules("none", grace=45))
    assert tuple(r.slot for r in plan.runs) == minutes(5)
    assert plan.missed == minutes(1, 2, 3, 4)
    late = plan_slots(EVERY_MINUTE, last_scheduled_at=T0, now=now, rules=rules("none", grace=10))
    assert late.runs == ()
    assert late.missed == minutes(1, 2, 3, 4, 5)


def test_slots_older_than_the_window_are_summarised_not_enumerated():
    last = T0 - timedelta(days=365)  # a year of downtime
    now = T0 + timedelta(minutes=3)
    plan = plan_slots(
        EVERY_MINUTE, last_scheduled_at=last, now=now, rules=rules("all", window=300, grace=0)
    )
    assert tuple(r.slot for r in plan.runs) == minutes(-1, 0, 1, 2, 3)
    assert plan.unrecorded is not None
    assert plan.unrecorded.after == last
    assert plan.unrecorded.until == now - timedelta(seconds=300)
    assert plan.unrecorded.count is None


def test_missed_records_are_bounded_and_the_rest_is_counted():
    now = T0 + timedelta(seconds=1000)
    plan = plan_slots(EVERY_SECOND, last_scheduled_at=T0, now=now, rules=rules("latest", limit=50))
    assert len(plan.runs) == 1
    assert plan.runs[0].slot == now
    assert len(plan.missed) == 50
    assert plan.missed[-1] == now - timedelta(seconds=1)
    assert plan.unrecorded is not None
    assert plan.unrecorded.count == 1000 - 1 - 50
    assert plan.unrecorded.after == T0
    assert plan.unrecorded.until == plan.missed[0] - timedelta(seconds=1)


def test_none_with_many_late_slots_still_bounds_missed_records():
    now = T0 + timedelta(seconds=500)
    plan = plan_slots(
        EVERY_SECOND, last_scheduled_at=T0, now=now, rules=rules("none", cap=5, grace=2, limit=20)
    )
    assert [r.slot for r in plan.runs] == [now - timedelta(seconds=s) for s in (2, 1, 0)]
    assert len(plan.missed) == 20
    assert plan.unrecorded is not None
    assert plan.unrecorded.count == 500 - 3 - 20


def test_watermark_in_the_future_plans_nothing():
    plan = plan_slots(
        EVERY_MINUTE, last_scheduled_at=T0, now=T0 - timedelta(minutes=5), rules=rules()
    )
    assert plan.is_empty
    assert plan.watermark == T0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"policy": "sometimes"}, "catchup_policy"),
        ({"window": 0}, "catchup_window"),
        ({"cap": 0}, "catchup_cap"),
        ({"grace": -1}, "catchup_grace"),
        ({"limit": -1}, "missed_record_limit"),
    ],
)
def test_bad_rules_are_refused(kwargs, field):
    with pytest.raises(ScheduleError) as caught:
        rules(**kwargs)
    assert caught.value.field == field


@settings(max_examples=200, deadline=None)
@given(
    policy=st.sampled_from(["all", "latest", "none"]),
    down=st.integers(0, 4000),
    window=st.integers(1, 3000),
    cap=st.integers(1, 20),
    grace=st.integers(0, 120),
    limit=st.integers(0, 50),
    cron=st.sampled_from(["* * * * * *", "* * * * * */7", "*/3 * * * *", "0 * * * *"]),
)
def test_every_due_slot_is_decided_exactly_once(policy, down, window, cap, grace, limit, cron):
    schedule = CronSchedule.parse(cron, "Europe/Berlin")
    now = T0 + timedelta(seconds=down)
    plan = plan_slots(
        schedule, last_scheduled_at=T0, now=now, rules=rules(policy, window, cap, grace, limit)
    )
    run = [r.slot for r in plan.runs]
    decided = sorted(run + list(plan.missed))
    assert len(set(decided)) == len(decided), "a slot is both run and missed"
    assert len(run) <= (1 if policy == "latest" else cap)
    assert len(plan.missed) <= limit
    # Every due slot is either decided individually or inside the unrecorded summary.
    due = list(takewhile(lambda t: t <= now, schedule.iter_after(T0)))
    for slot in due:
        if slot in decided:
            continue
        assert plan.unrecorded is not None
        assert plan.unrecorded.after < slot <= plan.unrecorded.until
    assert all(T0 < s <= now for s in decided)
    if plan.unrecorded is not None:
        assert all(s > plan.unrecorded.until for s in decided)
        if plan.unrecorded.count is not None:
            assert plan.unrecorded.count == len([s for s in due if s <= plan.unrecorded.until])
    assert all(now - s < timedelta(seconds=window) for s in run)
    assert plan.next_run_at == schedule.next_after(now)


@pytest.mark.parametrize(
    ("policy", "running", "waiting", "buffered", "verdict", "why", "stops"),
    [
        ("allow", 3, 5, 2, "run", "", False),
        ("skip", 0, 0, 0, "run", "", False),
        ("skip", 1, 0, 0, "skip", "overlap", False),
        ("skip", 0, 1, 0, "skip", "overlap", False),
        ("skip", 0, 0, 1, "skip", "overlap", False),
        ("buffer_one", 0, 0, 0, "run", "", False),
        ("buffer_one", 1, 0, 0, "run", "", False),
        ("buffer_one", 1, 1, 0, "skip", "overlap", False),
        ("buffer_one", 0, 1, 0, "skip", "overlap", False),
        ("buffer_all", 0, 0, 0, "run", "", False),
        ("buffer_all", 1, 0, 0, "buffer", "", False),
        ("buffer_all", 0, 1, 0, "buffer", "", False),
        ("buffer_all", 1, 0, 2, "buffer", "", False),
        ("buffer_all", 1, 0, 3, "skip", "buffer_full", False),
        ("cancel_other", 0, 0, 0, "run", "", False),
        ("cancel_other", 1, 0, 0, "buffer", "", True),
        ("cancel_other", 0, 0, 1, "buffer", "", True),
        ("terminate_other", 0, 0, 0, "run", "", False),
        ("terminate_other", 1, 0, 0, "buffer", "", True),
    ],
)
def test_the_overlap_policy_decides_whether_one_more_run_goes_waits_or_is_skipped(
    policy, running, waiting, buffered, verdict, why, stops
):
    from django_cluster_cron.core.overlap import decide

    decision = decide(policy, running=running, waiting=waiting, buffered=buffered, max_buffered=3)
    assert decision.verdict.value == verdict
    assert decision.why_not_run == why
    assert decision.stop_others is stops
    if verdict != "run":
        assert policy in decision.reason
    else:
        assert decision.reason == ""


def test_retry_delays_grow_exponentially_with_jitter_and_respect_the_cap():
    import random

    from django_cluster_cron.core.retry import retry_delay

    rng = random.Random(7)
    for attempt, full in [(1, 2.0), (2, 4.0), (3, 8.0), (4, 10.0), (9, 10.0)]:
        plain = retry_delay(attempt, base=2, cap=10, jitter=False)
        assert plain == full
        jittered = retry_delay(attempt, base=2, cap=10, rng=rng)
        assert full / 2 <= jittered <= full
    with pytest.raises(ValueError, match="failed_attempt"):
        retry_delay(0, base=1, cap=1)


# -- a run recorded for its slot, not sent at its time, found late ---------------------------


@pytest.mark.parametrize(
    ("policy", "late", "expected"),
    [
        ("none", 59, LateVerdict.ON_TIME),
        ("none", 61, LateVerdict.MISSED_POLICY),
        ("latest", 61, LateVerdict.CATCH_UP),  # the next slot (+300 s) is not due yet
        ("latest", 301, LateVerdict.MISSED_POLICY),
        ("all", 301, LateVerdict.CATCH_UP),
        ("all", 10 * 300 + 1, LateVerdict.MISSED_POLICY),  # ten newer slots are due: the cap
        ("all", 3600, LateVerdict.MISSED_WINDOW),
    ],
)
def test_judge_unsent(policy, late, expected):
    every_five = CronSchedule.parse("*/5 * * * *", "UTC")
    found = judge_unsent(
        every_five, slot=T0, due=T0, now=T0 + timedelta(seconds=late), rules=rules(policy)
    )
    assert found is expected


@settings(max_examples=300, deadline=None)
@given(
    policy=st.sampled_from(["all", "latest", "none"]),
    cron=st.sampled_from(["* * * * *", "*/5 * * * *", "*/7 * * * *", "0 * * * *"]),
    late=st.integers(min_value=0, max_value=4 * 3600),
    window=st.integers(min_value=60, max_value=3 * 3600),
    cap=st.integers(min_value=1, max_value=12),
    grace=st.integers(min_value=0, max_value=300),
)
def test_a_run_found_late_meets_the_fate_the_planner_gives_its_slot(
    policy, cron, late, window, cap, grace
):
    """The oracle: a leader that never recorded a late slot would plan it from just before it;
    the run recorded for it and found unsent past the grace is judged to the same fate. Within
    the grace it was not late: it goes as recorded."""
    schedule = CronSchedule.parse(cron, "UTC")
    slot = schedule.next_after(T0)
    assert slot is not None
    now = slot + timedelta(seconds=late)
    found_rules = rules(policy, window=window, cap=cap, grace=grace)
    verdict = judge_unsent(schedule, slot=slot, due=slot, now=now, rules=found_rules)
    if late <= grace:
        assert verdict is LateVerdict.ON_TIME
        return
    plan = plan_slots(
        schedule, last_scheduled_at=slot - timedelta(microseconds=1), now=now, rules=found_rules
    )
    planned = {run.slot: run.trigger for run in plan.runs}
    if verdict is LateVerdict.CATCH_UP:
        assert planned.get(slot) is Trigger.CATCHUP
    else:
        assert verdict in (LateVerdict.MISSED_POLICY, LateVerdict.MISSED_WINDOW)
        assert slot not in planned
        assert (verdict is LateVerdict.MISSED_WINDOW) == (late >= window)
