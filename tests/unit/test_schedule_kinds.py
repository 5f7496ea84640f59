"""Intervals (``@every``) and one-offs (``@at``): reading, errors in our words, fire times, DST.

The fire times are compared with independent models written here, which share no code with the
app: an interval found by a galloping walk from its anchor (the app divides), and a one-off found
by scanning real minutes for the first whose local clock reading is at or past the wall time (the
app asks the zone about gaps and repeats). Hypothesis draws the cases around the real DST
transitions of zones with ordinary, 30-minute, off-the-hour and midnight changes.
"""

from __future__ import annotations

import functools
import itertools
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from django_cluster_cron.describe import describe
from django_cluster_cron.schedule import (
    IntervalSchedule,
    OneOffSchedule,
    ScheduleError,
    fire_times,
    parse,
    validate_schedule,
)

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "America/Santiago",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Asia/Kolkata",
]


# -- independent models ----------------------------------------------------------------------


def model_interval(
    anchor: datetime, step: timedelta, after: datetime, count: int
) -> list[datetime]:
    """Walk from the anchor (its next whole second) towards ``after`` in doubling strides, then
    one step at a time."""
    point = anchor
    if point.microsecond:
        point = point.replace(microsecond=0) + timedelta(seconds=1)
    if point > after:
        while point - step > after:
            stride = step
            while point - stride * 2 > after:
                stride *= 2
            point -= stride
    else:
        while point <= after:
            stride = step
            while point + stride * 2 <= after:
                stride *= 2
            point += stride
    return [point + step * i for i in range(count)]


def model_once(wall: datetime, zone_name: str) -> datetime:
    """The first real minute whose local reading is at or past ``wall`` (a skipped wall time
    reads past it first at the end of the gap; a repeated one first at its first pass)."""
    zone = ZoneInfo(zone_name)
    minute = (wall - timedelta(hours=30)).replace(tzinfo=UTC)
    while True:
        if minute.astimezone(zone).replace(tzinfo=None) >= wall:
            return minute
        minute += timedelta(minutes=1)


@functools.cache
def transitions(zone_name: str) -> list[datetime]:
    """The zone's offset changes in 2015-2030, found hour by hour, refined to the minute."""
    zone = ZoneInfo(zone_name)
    found = []
    hour = datetime(2015, 1, 1, tzinfo=UTC)
    offset = hour.astimezone(zone).utcoffset()
    while hour.year < 2031:
        nxt = hour + timedelta(hours=1)
        if nxt.astimezone(zone).utcoffset() != offset:
            minute = hour
            while minute.astimezone(zone).utcoffset() == offset:
                minute += timedelta(minutes=1)
            found.append(minute)
            offset = nxt.astimezone(zone).utcoffset()
        hour = nxt
    return found or [datetime(2024, 6, 1, tzinfo=UTC)]


@st.composite
def near_transition(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone and a wall time (whole minutes) within three hours of one of its transitions."""
    zone_name = draw(st.sampled_from(ZONES))
    instant = draw(st.sampled_from(transitions(zone_name)))
    shift = draw(st.integers(-180, 180))
    local = instant.astimezone(ZoneInfo(zone_name)).replace(tzinfo=None)
    return zone_name, local + timedelta(minutes=shift)


# -- intervals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds", "canonical"),
    [
        ("@every 90s", 90, "@every 1m30s"),
        ("@every 7m", 420, "@every 7m"),
        ("@every 1h30m", 5400, "@every 1h30m"),
        ("@every 36h", 129_600, "@every 1d12h"),
        ("@every 2d", 172_800, "@every 2d"),
        ("@EVERY  1S", 1, "@every 1s"),
        ("@every 1d2h3m4s", 93_784, "@every 1d2h3m4s"),
    ],
)
def test_intervals_read(text: str, seconds: int, canonical: str) -> None:
    schedule = parse(text, "UTC")
    assert isinstance(schedule, IntervalSchedule)
    assert schedule.interval == timedelta(seconds=seconds)
    assert schedule.expression == canonical
    assert schedule.kind == "interval"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("@every", "needs a duration"),
        ("@every 0s", "shortest interval is 1s"),
        ("@every 0m0s", "shortest interval is 1s"),
        ("@every 1.5h", "no fractions"),
        ("@every -5m", "not a duration"),
        ("@every 5", "not a duration"),
        ("@every 5x", "unknown unit 'x'"),
        ("@every 5min", "unknown unit 'min'"),
        ("@every 30m1h", "largest to the smallest"),
        ("@every 1h1h", "appears twice"),
        ("@every 1h 30m", "without spaces"),
        ("@every 3651d", "longest interval"),
        ("@every90s", "put a space after '@every'"),
        ("@every 99999999999999999s", "too long"),
    ],
)
def test_bad_intervals_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        validate_schedule(text)
    assert caught.value.field == "cron"
    assert words in str(caught.value)


def test_an_interval_counts_from_the_epoch_or_its_anchor() -> None:
    after = datetime(2026, 11, 27, 12, 0, 5, tzinfo=UTC)
    # 2026-11-27T12:00:00Z is a multiple of 90 s since the epoch (1,764,244,800 s).
    assert fire_times("@every 90s", "UTC", after, 2) == [
        datetime(2026, 11, 27, 12, 1, 30, tzinfo=UTC),
        datetime(2026, 11, 27, 12, 3, tzinfo=UTC),
    ]
    anchor = datetime(2026, 11, 27, 11, 59, 50, tzinfo=UTC)
    assert fire_times("@every 90s", "UTC", after, 1, anchor=anchor) == [
        datetime(2026, 11, 27, 12, 1, 20, tzinfo=UTC)
    ]
    # Before its anchor the cadence runs backwards too: the same instants on every host.
    assert fire_times("@every 1h", "UTC", anchor - timedelta(hours=2), 1, anchor=anchor) == [
        anchor - timedelta(hours=1)
    ]


def test_an_interval_keeps_real_time_across_dst() -> None:
    """Europe/Berlin springs forward on 2026-03-29 at 02:00: the fire times stay 2 h apart in
    real time, and their local readings jump by the hour the clock skipped."""
    after = datetime(2026, 3, 28, 20, 0, tzinfo=UTC)
    times = fire_times("@every 2h", "Europe/Berlin", after, 4)
    assert [b - a for a, b in itertools.pairwise(times)] == [timedelta(hours=2)] * 3
    berlin = ZoneInfo("Europe/Berlin")
    assert [f"{t.astimezone(berlin):%H:%M}" for t in times] == ["23:00", "01:00", "04:00", "06:00"]
    for zone in ZONES:  # the zone changes nothing
        assert fire_times("@every 2h", zone, after, 4) == times
    assert parse("@every 2h", "Europe/Berlin").dst_note(times[2]) is None


@settings(max_examples=300, deadline=None)
@given(
    seconds=st.integers(1, 3 * 86_400),
    anchor=st.datetimes(datetime(1971, 1, 1), datetime(2100, 1, 1), timezones=st.just(UTC)),
    after=st.datetimes(datetime(1971, 1, 1), datetime(2100, 1, 1), timezones=st.just(UTC)),
    zone=st.sampled_from(ZONES),
)
@example(seconds=90, anchor=EPOCH, after=datetime(2026, 1, 1, tzinfo=UTC), zone="UTC")
@example(seconds=7, anchor=datetime(2030, 1, 1, tzinfo=UTC), after=EPOCH, zone="Europe/Berlin")
def test_intervals_match_the_model(
    seconds: int, anchor: datetime, after: datetime, zone: str
) -> None:
    step = timedelta(seconds=seconds)
    schedule = IntervalSchedule.parse(f"@every {seconds}s", zone, anchor)
    assert schedule.fire_times(after, 5) == model_interval(anchor, step, after, 5)


def test_an_interval_with_a_start_fires_at_the_start() -> None:
    from django_cluster_cron.core.timing import SlotTiming

    start = datetime(2026, 12, 1, 9, 0, 7, tzinfo=UTC)
    schedule = parse("@every 7m", "UTC", start)
    timing = SlotTiming(start_at=start)
    slots = list(itertools.islice(timing.slots_after(schedule, start - timedelta(days=1)), 3))
    assert slots == [start + timedelta(minutes=7 * k) for k in range(3)]


# -- one-offs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "zone", "instant", "canonical"),
    [
        ("@at 2026-12-24T18:00", "Europe/Berlin", "2026-12-24T17:00:00", "@at 2026-12-24T18:00:00"),
        ("@at 2026-12-24 18:00:30", "UTC", "2026-12-24T18:00:30", "@at 2026-12-24T18:00:30"),
        (
            "@at 2026-12-24T18:00Z",
            "Asia/Kolkata",
            "2026-12-24T18:00:00",
            "@at 2026-12-24T18:00:00Z",
        ),
        (
            "@at 2026-12-24T18:00+05:30",
            "UTC",
            "2026-12-24T12:30:00",
            "@at 2026-12-24T18:00:00+05:30",
        ),
        (
            "@at 2026-12-24T18:00-0800",
            "UTC",
            "2026-12-25T02:00:00",
            "@at 2026-12-24T18:00:00-08:00",
        ),
        # DST: a skipped wall time runs at the end of the gap, a repeated one at its first pass.
        ("@at 2026-03-29T02:30", "Europe/Berlin", "2026-03-29T01:00:00", None),
        ("@at 2026-10-25T02:30", "Europe/Berlin", "2026-10-25T00:30:00", None),
        ("@at 2024-03-10T02:30", "America/New_York", "2024-03-10T07:00:00", None),
        ("@at 2024-11-03T01:30", "America/New_York", "2024-11-03T05:30:00", None),
    ],
)
def test_one_offs_read(text: str, zone: str, instant: str, canonical: str | None) -> None:
    schedule = parse(text, zone)
    assert isinstance(schedule, OneOffSchedule)
    expected = datetime.fromisoformat(instant).replace(tzinfo=UTC)
    assert schedule.instant == expected
    assert schedule.last_fire() == expected
    if canonical:
        assert schedule.expression == canonical
    before = expected - timedelta(seconds=1)
    assert schedule.fire_times(before, 5) == [expected]
    assert schedule.fire_times(expected, 5) == []
    assert schedule.next_after(expected) is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("@at", "needs a date and time"),
        ("@at tomorrow", "is not a date and time"),
        ("@at 2026-12-24", "is not a date and time"),
        ("@at 2026-02-30T10:00", "no such date or time"),
        ("@at 2026-12-24T24:00", "no such date or time"),
        ("@at 2026-12-24T18:00:00.5", "is not a date and time"),
        ("@at 2026-12-24T18:00+25:00", "not a UTC offset"),
        ("@at 1969-12-31T23:00Z", "between 1970 and 9997"),
        ("@at2026-12-24T18:00", "put a space after '@at'"),
    ],
)
def test_bad_one_offs_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        validate_schedule(text)
    assert caught.value.field == "cron"
    assert words in str(caught.value)


def test_one_off_notes_say_what_dst_did() -> None:
    gap = OneOffSchedule.parse("@at 2026-03-29T02:30", "Europe/Berlin")
    assert "03:00" in (gap.dst_note(gap.instant) or "")
    repeat = OneOffSchedule.parse("@at 2026-10-25T02:30", "Europe/Berlin")
    assert "first only" in (repeat.dst_note(repeat.instant) or "")
    assert (
        parse("@at 2026-07-01T12:00", "Europe/Berlin").dst_note(
            datetime(2026, 7, 1, 10, tzinfo=UTC)
        )
        is None
    )


@settings(max_examples=300, deadline=None)
@given(near_transition())
def test_one_offs_match_the_model_around_transitions(case: tuple[str, datetime]) -> None:
    zone_name, wall = case
    schedule = parse(f"@at {wall:%Y-%m-%dT%H:%M}", zone_name)
    assert schedule.fire_times(wall.replace(tzinfo=UTC) - timedelta(days=2), 3) == [
        model_once(wall, zone_name)
    ]


def test_the_zone_is_checked_for_every_kind() -> None:
    for text in ("@every 5m", "@at 2026-12-24T18:00"):
        with pytest.raises(ScheduleError) as caught:
            parse(text, "Mars/Olympus")
        assert caught.value.field == "timezone"


def test_every_kind_in_words() -> None:
    assert describe("@every 90s") == "Every 1 minute 30 seconds (elapsed time)"
    assert describe("@at 2026-12-24T18:00") == (
        "Once, at 2026-12-24 18:00:00 in the job's time zone"
    )
    assert describe("@at 2026-12-24T18:00+01:00") == "Once, at 2026-12-24 17:00:00 UTC"
    assert describe("@every_minute") == "@every_minute"  # not a schedule: shown as written


def test_holiday_calendars_without_the_package_say_which_extra_to_install(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "holidays", None)  # import holidays -> ImportError
    with pytest.raises(ScheduleError) as caught:
        parse("@daily", "UTC", exclusions=["holidays:US"])
    assert caught.value.field == "exclusions"
    assert "django-cluster-cron[holidays]" in str(caught.value)
    # Dates and ranges need no package.
    assert parse("@daily", "UTC", exclusions=["2026-12-24"]).fire_times(
        datetime(2026, 12, 23, tzinfo=UTC), 2
    ) == [datetime(2026, 12, 25, tzinfo=UTC), datetime(2026, 12, 26, tzinfo=UTC)]


def test_an_excluded_stretch_is_skipped_a_day_at_a_time() -> None:
    """An every-second job over a two-week exclusion asks for one fire time a day, not a
    million; and ten years of nothing but exclusions end the schedule."""
    schedule = parse("* * * * * *", "Europe/Berlin", exclusions=["2026-12-20..2027-01-02"])
    after = datetime(2026, 12, 19, 22, 59, 58, tzinfo=UTC)  # 23:59:58 in Berlin
    assert schedule.fire_times(after, 2) == [
        datetime(2026, 12, 19, 22, 59, 59, tzinfo=UTC),
        datetime(2027, 1, 2, 23, 0, tzinfo=UTC),  # 2027-01-03 00:00 in Berlin
    ]
    never = parse("* * * * * *", "UTC", exclusions=["2026-01-01..2040-01-01"])
    assert never.fire_times(datetime(2026, 1, 1, tzinfo=UTC), 1) == []


# -- exclusions ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    expression=st.sampled_from(
        ["*/20 * * * *", "30 2 * * *", "0 */5 * * *", "@every 7h", "@every 50m", "0 0 * * 1L"]
    ),
    zone=st.sampled_from(ZONES),
    start=st.datetimes(datetime(2020, 1, 1), datetime(2030, 1, 1), timezones=st.just(UTC)),
    excluded=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), min_size=1, max_size=4),
)
def test_exclusions_match_filtering_the_plain_schedule(
    expression: str, zone: str, start: datetime, excluded: list[tuple[int, int]]
) -> None:
    """The model: take the plain schedule's fire times and drop those whose local date is in a
    rule, one by one (the app skips whole days and asks again)."""
    first = start.astimezone(ZoneInfo(zone)).date()
    rules = []
    banned: set[date] = set()
    for offset, length in excluded:
        lo = first + timedelta(days=offset)
        hi = lo + timedelta(days=length)
        rules.append(f"{lo}" if length == 0 else f"{lo}..{hi}")
        banned.update(lo + timedelta(days=d) for d in range(length + 1))
    plain = parse(expression, zone).fire_times(start, 3000)
    kept = [t for t in plain if t.astimezone(ZoneInfo(zone)).date() not in banned][:20]
    assert parse(expression, zone, exclusions=rules).fire_times(start, len(kept)) == kept


def test_holiday_names_are_english_whatever_the_locale(monkeypatch) -> None:
    """The holidays package names holidays in the process's language (LANG) unless told; the
    reasons the previews show must not depend on the host."""
    from django_cluster_cron.core import exclusions

    for name in ("LANG", "LC_ALL", "LANGUAGE"):
        monkeypatch.setenv(name, "de_DE.UTF-8")
    exclusions._holidays_of_year.cache_clear()
    try:
        rules = exclusions.parse_exclusions(["holidays:DE-BY"])
        assert rules.reason(date(2026, 12, 25)) == "2026-12-25: Christmas Day (DE-BY)"
    finally:
        exclusions._holidays_of_year.cache_clear()
