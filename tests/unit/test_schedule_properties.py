"""Property-based tests of the fire-time iterator, plus brute-force oracles around DST changes."""

from collections import Counter
from datetime import date, datetime, timedelta, timezone
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_cluster_cron.schedule import CronSchedule, fire_times

UTC = timezone.utc
ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Australia/Sydney",
    "America/Santiago",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "Europe/London",
]


def field(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    return st.one_of(
        st.just("*"),
        st.builds(lambda n: f"*/{n}", st.integers(1, max(1, (high - low) // 2))),
        number.map(str),
        st.tuples(number, number).map(lambda p: f"{min(p)}-{max(p)}"),
        st.lists(number, min_size=2, max_size=4, unique=True).map(
            lambda v: ",".join(map(str, sorted(v)))
        ),
    )


crons = st.builds(
    lambda m, h, d, mo, w: f"{m} {h} {d} {mo} {w}",
    field(0, 59),
    field(0, 23),
    st.one_of(st.just("*"), field(1, 28)),
    st.one_of(st.just("*"), field(1, 12)),
    st.one_of(st.just("*"), field(0, 6)),
)
instants = st.datetimes(
    min_value=datetime(1995, 1, 1), max_value=datetime(2045, 1, 1), timezones=st.just(UTC)
)


@settings(max_examples=300, deadline=None)
@given(cron=crons, zone=st.sampled_from(ZONES), after=instants)
def test_fire_times_are_aware_utc_strictly_increasing_and_after_the_start(cron, zone, after):
    got = fire_times(cron, zone, after, 25)
    assert got, "every expression from this grammar fires"
    assert all(t.tzinfo is UTC for t in got)
    assert got[0] > after
    assert all(a < b for a, b in pairwise(got))


@settings(max_examples=200, deadline=None)
@given(cron=crons, zone=st.sampled_from(ZONES), after=instants, k=st.integers(1, 20))
def test_restarting_from_any_fire_time_continues_the_same_sequence(cron, zone, after, k):
    got = fire_times(cron, zone, after, k + 5)
    again = fire_times(cron, zone, got[k - 1], 5)
    assert again == got[k : k + 5]


@settings(max_examples=40, deadline=None)
@given(
    minute=st.integers(0, 59),
    hour=st.integers(0, 23),
    zone=st.sampled_from(ZONES),
    year=st.integers(2000, 2040),
)
def test_a_fixed_time_daily_job_fires_exactly_once_per_local_day(minute, hour, zone, year):
    tz = ZoneInfo(zone)
    start = datetime(year, 1, 1, tzinfo=tz).astimezone(UTC) - timedelta(seconds=1)
    end = datetime(year + 1, 1, 1, tzinfo=tz).astimezone(UTC)
    got = [t for t in fire_times(f"{minute} {hour} * * *", zone, start, 370) if t < end]
    per_day = Counter(t.astimezone(tz).date() for t in got)
    days = (date(year + 1, 1, 1) - date(year, 1, 1)).days
    assert len(per_day) == days
    assert set(per_day.values()) == {1}


def _matching_walls(cron: str, first: datetime, last: datetime) -> set[datetime]:
    """Brute-force oracle: the naive wall times in [first, last] that ``cron`` matches.

    In UTC wall time and instants coincide, so the UTC schedule lists the matching walls.
    """
    start = first.replace(tzinfo=UTC) - timedelta(seconds=1)
    walls = (t.replace(tzinfo=None) for t in CronSchedule.parse(cron, "UTC").iter_after(start))
    result: set[datetime] = set()
    for wall in walls:
        if wall > last:
            return result
        result.add(wall)
    return result


TRANSITION_DAYS = [
    ("America/New_York", date(2024, 3, 10)),
    ("America/New_York", date(2024, 11, 3)),
    ("Europe/Berlin", date(2024, 3, 31)),
    ("Europe/Berlin", date(2024, 10, 27)),
    ("Australia/Lord_Howe", date(2024, 4, 7)),
    ("Australia/Lord_Howe", date(2024, 10, 6)),
    ("America/Santiago", date(2024, 9, 8)),
    ("America/Santiago", date(2024, 4, 7)),
]


@pytest.mark.parametrize(("zone", "day"), TRANSITION_DAYS)
@pytest.mark.parametrize("cron", ["*/15 * * * *", "0 * * * *", "30 */2 * * *", "*/10 1,2 * * *"])
def test_real_time_jobs_fire_at_exactly_the_instants_whose_wall_time_matches(zone, day, cron):
    tz = ZoneInfo(zone)
    begin = datetime.combine(day, datetime.min.time(), tz).astimezone(UTC) - timedelta(hours=3)
    finish = begin + timedelta(hours=30)
    margin = timedelta(hours=3)
    walls = _matching_walls(
        cron,
        begin.astimezone(tz).replace(tzinfo=None) - margin,
        finish.astimezone(tz).replace(tzinfo=None) + margin,
    )
    expected = []
    t = begin + timedelta(minutes=1)
    while t < finish:
        if t.astimezone(tz).replace(tzinfo=None) in walls:
            expected.append(t)
        t += timedelta(minutes=1)
    got = [x for x in fire_times(cron, zone, begin, 200) if x < finish]
    assert got == expected


@pytest.mark.parametrize(("zone", "day"), TRANSITION_DAYS)
@pytest.mark.parametrize(
    "cron", ["30 1 * * *", "0 2 * * *", "45 2 * * *", "0 0 * * *", "15 3 * * *"]
)
def test_wall_clock_jobs_fire_at_first_occurrence_or_at_the_end_of_a_gap(zone, day, cron):
    tz = ZoneInfo(zone)
    minute, hour = (int(x) for x in cron.split()[:2])
    wall = datetime.combine(day, datetime.min.time()).replace(hour=hour, minute=minute)
    # Oracle: scanning real minutes, the first instant whose wall reading reaches the target is
    # the fire time: the target itself, its first occurrence if repeated, the gap's end if skipped.
    t = datetime.combine(day, datetime.min.time(), tz).astimezone(UTC) - timedelta(hours=1)
    while t.astimezone(tz).replace(tzinfo=None) < wall:
        t += timedelta(minutes=1)
    day_start = datetime.combine(day, datetime.min.time(), tz).astimezone(UTC) - timedelta(hours=2)
    got = [x for x in fire_times(cron, zone, day_start, 3) if x.astimezone(tz).date() == day]
    assert got == [t]
