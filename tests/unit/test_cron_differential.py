"""Our fire times against an independent implementation: cronsim (test-only, never a runtime dep).

Hypothesis generates expressions across the whole dialect — lists mixing every item kind, equal
ranges, steps of any size, names, 7 for Sunday, ``L``, ``5L``/``L5``, ``#`` — and compares the next
fire times with cronsim's in zones with ordinary, midnight and +12:45 DST changes and without DST.

Where the two readings differ on purpose, the generator avoids it and a parametrized test below
pins our behaviour instead:

* seconds: ours is the 6th field (last), cronsim's the 1st — translated before comparing;
* a 6-field wall-clock expression (fixed minute and hour) in a DST gap or repeat: cronsim applies
  no DST rule to 6-field expressions (it skips gap slots and fires repeated ones twice); ours
  applies the same rule as to 5 fields (``test_dst.py``) — such cases are compared in UTC only;
* ``a-a/n`` (an equal range with a step): cronsim reads it as ``a/n``, ours as ``a`` alone
  (Vixie cron), pinned in test_cron_dialect;
* ``LW``, ``L/2``: cronsim accepts them, our dialect refuses them (tested in test_cron_dialect);
* cronsim can return a wall time that does not exist (a day starting inside a gap, as in
  America/Santiago): it is not a real local time and is dropped from its results (ours never
  fires a real-time job there, test_dst.py), unless the instant it names shows a wall time the
  expression matches — ``* * * sep sun`` gives 00:00 -04:00 for 01:00 -03:00 on 2020-09-06, a
  real fire it then does not give again;
* real-time jobs in zones whose clock changes off the hour (Australia/Lord_Howe's 30-minute
  shift, Pacific/Chatham's change at 02:45/03:45) are compared for wall-clock jobs only: cronsim
  steps whole hours from the top of the hour and, after such a change, lands on :30 or :45 —
  it skips ``0 0`` the day after Lord Howe's shift for ``*/30 */24 * * *`` and the second pass
  of Chatham's repeated 02:45 for ``*/45 2 * * *``. Our rules there are checked by brute force
  in test_schedule_properties.py;
* ``after`` inside a repeated hour for a wall-clock job: cronsim restarts from the wall time and can
  return an instant before ``after``; its results are filtered to ``> after``.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim, CronSimError
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from django_cluster_cron.schedule import CronSchedule, fire_times

UTC = timezone.utc
COUNT = 12
# Zones whose clock changes at a time that is not a whole hour (see the module docstring).
OFF_THE_HOUR = {"Australia/Lord_Howe", "Pacific/Chatham"}
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "America/Santiago",
    "Pacific/Chatham",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Europe/Riga",
]
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


def value(
    low: int, high: int, names: list[str] | None = None, offset: int = 0
) -> st.SearchStrategy[str]:
    numbers = st.integers(low, high).map(str)
    if not names:
        return numbers
    named = st.integers(0, len(names) - 1).map(
        lambda i: st.sampled_from([names[i], names[i].upper(), names[i].title()])
    )
    return st.one_of(numbers, named.flatmap(lambda s: s))


def _name_number(text: str, names: list[str] | None, offset: int) -> int:
    if text.isdigit():
        return int(text)
    assert names is not None
    return names.index(text.lower()) + offset


def item(low: int, high: int, names: list[str] | None = None, offset: int = 0):
    one = value(low, high, names, offset)
    big_step = st.integers(1, 120).map(str)

    def ordered(pair):
        a, b = pair
        na, nb = _name_number(a, names, offset), _name_number(b, names, offset)
        return f"{a}-{b}" if na <= nb else f"{b}-{a}"

    pair = st.tuples(one, one).map(ordered)
    proper_pair = (
        st.tuples(one, one)
        .filter(lambda p: _name_number(p[0], names, offset) != _name_number(p[1], names, offset))
        .map(ordered)
    )
    return st.one_of(
        st.just("*"),
        st.builds(lambda s: f"*/{s}", big_step),
        one,
        one.map(lambda v: f"{v}-{v}"),  # an equal range
        pair,
        # ``a-a/n``: cronsim reads it as ``a/n`` (a to the field's end); ours is ``a`` alone,
        # as in Vixie cron — pinned in test_cron_dialect, kept out of the comparison.
        st.builds(lambda r, s: f"{r}/{s}", proper_pair, big_step),
        st.builds(lambda v, s: f"{v}/{s}", one, big_step),
    )


def field_text(items: st.SearchStrategy) -> st.SearchStrategy[str]:
    return st.lists(items, min_size=1, max_size=4).map(",".join)


def weekday_field() -> st.SearchStrategy[str]:
    plain = item(0, 7, DAYS)
    special = st.one_of(
        st.builds(lambda d: f"{d}L", st.integers(0, 7)),
        st.builds(lambda d, n: f"{d}#{n}", value(0, 7, DAYS), st.integers(1, 5)),
    )
    return field_text(st.one_of(plain, plain, special))


def day_field() -> st.SearchStrategy[str]:
    return field_text(st.one_of(item(1, 31), item(1, 31), st.just("L")))


expressions = st.builds(
    lambda *parts: " ".join(parts),
    field_text(item(0, 59)),
    field_text(item(0, 23)),
    day_field(),
    field_text(item(1, 12, MONTHS, 1)),
    weekday_field(),
)
instants = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
).map(lambda t: t.replace(microsecond=0))


def for_cronsim(cron: str) -> str:
    """Our spelling in cronsim's: ``L5`` is ``5L`` there, seconds come first."""
    fields = cron.split()
    fields[4] = ",".join(
        f"{part[1:]}L" if part[:1] in "lL" and len(part) > 1 else part
        for part in fields[4].split(",")
    )
    if len(fields) == 6:
        fields = [fields[5], *fields[:5]]
    return " ".join(fields)


def cronsim_times(cron: str, zone: str, after: datetime, count: int) -> list[datetime]:
    """cronsim's next ``count`` fire times after ``after`` in UTC; fewer if it finds no more
    within its 50-year horizon (ours then must find none before that horizon either)."""
    start = after.astimezone(ZoneInfo(zone)) if zone != "UTC" else after
    spelled = for_cronsim(cron)
    try:
        iterator = CronSim(spelled, start)
    except CronSimError as refused:
        # cronsim refuses a day-of-month no allowed month has ("30" with "feb") before looking
        # at the day of the week. With a restricted day of the week Vixie's rule is "either
        # matches", and that day-of-month never does: the expression is its day-of-week part.
        fields = spelled.split()
        day, weekday = (fields[3], fields[5]) if len(fields) == 6 else (fields[2], fields[4])
        if "day-of-month" not in str(refused) or day.startswith("*") or weekday.startswith("*"):
            raise
        fields[3 if len(fields) == 6 else 2] = "*"
        spelled = " ".join(fields)
        iterator = CronSim(spelled, start)
    result: list[datetime] = []
    try:
        for _ in range(count * 3):
            local = next(iterator)
            instant = local.astimezone(UTC)
            real = instant.astimezone(local.tzinfo)
            if (
                local.tzinfo is not UTC
                and real.replace(tzinfo=None) != local.replace(tzinfo=None)
                and not _fires_at(spelled, instant, local.tzinfo)
            ):
                # A wall time that does not exist (cronsim reaches one when a day starts inside
                # a gap, America/Santiago's midnight change): not a fire time; skip it. Unless
                # the instant it names shows a wall time the expression matches (00:00 -04 is
                # 01:00 -03, the first minute after the gap): cronsim's spelling of that fire.
                continue
            if instant > after and (not result or instant > result[-1]):
                result.append(instant)
            if len(result) == count:
                break
    except StopIteration:
        pass
    return result


def _fires_at(spelled: str, instant: datetime, zone: Any) -> bool:
    """Does cronsim, started at the real wall time a second before ``instant``, fire next at
    that instant (compared in UTC: equal wall times in one zone compare without their fold)?"""
    start = (instant - timedelta(seconds=1)).astimezone(zone)
    found = next(CronSim(spelled, start), None)
    return found is not None and found.astimezone(UTC) == instant


def assert_agrees(cron: str, zone: str, after: datetime) -> None:
    ours = fire_times(cron, zone, after, COUNT)
    theirs = cronsim_times(cron, zone, after, COUNT)
    horizon = after + timedelta(days=49 * 365)
    assert ours[: len(theirs)] == theirs, (cron, zone, after)
    if len(theirs) < COUNT:  # cronsim gave up: ours must agree that nothing fires before then
        assert all(t > horizon for t in ours[len(theirs) :]), (cron, zone, after)


def parse_or_never(cron: str, zone: str) -> CronSchedule | None:
    """The parsed schedule, or None for one refused as never firing (the generator makes only
    valid syntax, so that is the one refusal allowed)."""
    try:
        return CronSchedule.parse(cron, zone)
    except ValueError as exc:
        if "never fires" not in str(exc):
            raise
        return None


@settings(max_examples=3000, deadline=None)
@given(cron=expressions, zone=st.sampled_from(ZONES), after=instants)
@example(cron="30 2-2 * * *", zone="UTC", after=datetime(2024, 1, 1, tzinfo=UTC))
@example(cron="0 0 * * 0-6,sat#3", zone="UTC", after=datetime(2024, 1, 1, tzinfo=UTC))
@example(cron="1 1 */100,1-7 * MON", zone="Europe/Berlin", after=datetime(2024, 1, 1, tzinfo=UTC))
@example(cron="0 0 * * 7/2", zone="America/New_York", after=datetime(2024, 1, 1, tzinfo=UTC))
@example(cron="* * 30/1 2 *", zone="UTC", after=datetime(2000, 1, 1, tzinfo=UTC))
@example(cron="* * 30 2 0", zone="UTC", after=datetime(2000, 1, 1, tzinfo=UTC))  # Sundays in Feb
@example(cron="* * * sep */7", zone="America/Santiago", after=datetime(2020, 1, 1, tzinfo=UTC))
def test_five_field_fire_times_agree_with_cronsim(cron, zone, after):
    schedule = parse_or_never(cron, zone)
    if schedule is None:
        try:
            theirs = cronsim_times(cron, zone, after, 1)
        except CronSimError:  # cronsim refuses it up front ("Bad day-of-month"): agreed
            return
        assert theirs == []
        return
    assume(zone not in OFF_THE_HOUR or schedule.wall_clock)
    assert_agrees(cron, zone, after)


seconds_expressions = st.builds(lambda five, s: f"{five} {s}", expressions, field_text(item(0, 59)))


@settings(max_examples=1000, deadline=None)
@given(cron=seconds_expressions, zone=st.sampled_from(ZONES), after=instants)
def test_six_field_fire_times_agree_with_cronsim(cron, zone, after):
    schedule = parse_or_never(cron, zone)
    if schedule is None:
        return
    if schedule.wall_clock:
        zone = "UTC"  # the documented difference: see the module docstring
    assume(zone not in OFF_THE_HOUR)
    assert_agrees(cron, zone, after)


def test_the_installed_time_zone_database_has_no_transitions_closer_than_a_few_hours():
    """The iterator's fast path assumes a zone's offset cannot change and change back within an
    hour (``CronSchedule._regular_offset``). Checked here on every zone of the installed tz
    database, through the pure-Python zoneinfo, which exposes the transition list."""
    import zoneinfo
    from zoneinfo import _zoneinfo  # type: ignore[attr-defined]

    closest = timedelta.max
    for key in sorted(zoneinfo.available_timezones()):
        zone = _zoneinfo.ZoneInfo.no_cache(key)
        changes = []
        previous = zone._tti_before.utcoff if zone._tti_before else None
        for moment, info in zip(zone._trans_utc, zone._ttinfos, strict=True):
            if info.utcoff != previous:
                changes.append(moment)
            previous = info.utcoff
        for a, b in itertools.pairwise(changes):
            closest = min(closest, timedelta(seconds=b - a))
    assert closest > timedelta(hours=3), closest


@pytest.mark.parametrize(
    ("cron", "zone", "after", "expected"),
    [
        # 6-field wall-clock expression in a spring-forward gap: one run after the gap (cronsim:
        # none), the same rule as for 5 fields.
        (
            "30 2 * * * 15",
            "America/New_York",
            datetime(2024, 3, 10, 5, tzinfo=UTC),
            [datetime(2024, 3, 10, 7, tzinfo=UTC), datetime(2024, 3, 11, 6, 30, 15, tzinfo=UTC)],
        ),
        # ... every second of 02:30 collapses into that one run, too.
        (
            "30 2 * * * *",
            "America/New_York",
            datetime(2024, 3, 10, 5, tzinfo=UTC),
            [datetime(2024, 3, 10, 7, tzinfo=UTC), datetime(2024, 3, 11, 6, 30, tzinfo=UTC)],
        ),
        # 6-field wall-clock expression in a repeated hour: first occurrence only (cronsim: both).
        (
            "30 1 * * * 15",
            "America/New_York",
            datetime(2024, 11, 3, 4, tzinfo=UTC),
            [
                datetime(2024, 11, 3, 5, 30, 15, tzinfo=UTC),
                datetime(2024, 11, 4, 6, 30, 15, tzinfo=UTC),
            ],
        ),
    ],
)
def test_six_field_expressions_follow_the_same_dst_rules_as_five_field_ones(
    cron, zone, after, expected
):
    assert fire_times(cron, zone, after, len(expected)) == expected
