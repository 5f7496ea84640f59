"""The coming-dispatches count against a plain recount of every job's dispatch times."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_cluster_cron.core.cron import CronSchedule
from django_cluster_cron.core.forecast import forecast
from django_cluster_cron.core.timing import SlotTiming, jitter_offset

START = datetime(2030, 3, 31, 0, 30, 15, tzinfo=timezone.utc)  # the night Europe moves clocks
CRONS = ["* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *", "*/20 * * * * *", "0 9 * * 1-5"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York"]


def recount(jobs, start, end):
    """Every dispatch in (start, end] by brute force: each slot in a wide range, plus its
    offset, kept if it lands inside."""
    dues = []
    for name, schedule, timing, left in jobs:
        mine = []
        for slot in schedule.iter_after(start - timing.jitter - timedelta(seconds=1)):
            if slot > end:
                break
            if timing.start_at and slot < timing.start_at:
                continue
            if timing.end_at and slot > timing.end_at:
                break
            due = slot + jitter_offset(timing.key, slot, timing.jitter)
            if start < due <= end:
                mine.append((due, name))
        mine.sort()
        dues += mine[:left] if left is not None else mine
    return dues


job = st.tuples(
    st.sampled_from(CRONS),
    st.sampled_from(ZONES),
    st.sampled_from([0, 0, 45, 600]),
    st.sampled_from([None, None, 0, 3]),
    st.sampled_from([None, timedelta(minutes=20)]),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(job, min_size=1, max_size=6), st.sampled_from([(1, 60), (3, 36), (24, 96)]))
def test_every_dispatch_is_counted_once_in_its_bucket(specs, window):
    hours, buckets = window
    end = START + timedelta(hours=hours)
    jobs = []
    for key, (cron, zone, jitter, left, starts) in enumerate(specs, start=1):
        timing = SlotTiming(
            start_at=START + starts if starts else None,
            jitter=timedelta(seconds=jitter),
            key=key if jitter else 0,
        )
        jobs.append((f"job-{key}", CronSchedule.parse(cron, zone), timing, left))
    found = forecast(jobs, START, end, buckets)
    expected = recount(jobs, START, end)
    assert found.total == len(expected)
    assert not found.truncated
    assert sum(b.count for b in found.buckets) == len(expected)
    width = (end - START) / buckets
    per_bucket = Counter(min(int((due - START) / width), buckets - 1) for due, _ in expected)
    assert [b.count for b in found.buckets] == [per_bucket[i] for i in range(buckets)]
    if expected:
        per_second = Counter(due.replace(microsecond=0) for due, _ in expected)
        top = max(per_second.values())
        assert found.busiest_count == top
        assert found.busiest_second == min(s for s, n in per_second.items() if n == top)


def test_counting_stops_at_the_limit_and_says_so():
    every_second = CronSchedule.parse("* * * * * *", "UTC")
    jobs = [(f"j{i}", every_second, SlotTiming(), None) for i in range(10)]
    found = forecast(jobs, START, START + timedelta(hours=1), 60, limit=5_000)
    assert found.truncated
    assert found.total == 5_000


def test_a_window_must_end_after_it_starts():
    with pytest.raises(ValueError, match="the window must end after it starts"):
        forecast([], START, START, 10)
