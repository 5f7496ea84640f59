"""The cron dialect: aliases, seconds, L and #, the day-of-month/day-of-week rule, bad input."""

import subprocess
import sys
from datetime import datetime, timezone

import pytest

from django_cluster_cron.schedule import ScheduleError, fire_times, validate_cron, validate_timezone

UTC = timezone.utc
START = datetime(2024, 1, 1, tzinfo=UTC)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("@hourly", [utc(2024, 1, 1, 1), utc(2024, 1, 1, 2)]),
        ("@daily", [utc(2024, 1, 2), utc(2024, 1, 3)]),
        ("@midnight", [utc(2024, 1, 2), utc(2024, 1, 3)]),
        ("@weekly", [utc(2024, 1, 7), utc(2024, 1, 14)]),
        ("@monthly", [utc(2024, 2, 1), utc(2024, 3, 1)]),
        ("@yearly", [utc(2025, 1, 1), utc(2026, 1, 1)]),
        ("@ANNUALLY", [utc(2025, 1, 1), utc(2026, 1, 1)]),
        ("* * * * * */5", [utc(2024, 1, 1, 0, 0, 5), utc(2024, 1, 1, 0, 0, 10)]),
        ("0 0 L * *", [utc(2024, 1, 31), utc(2024, 2, 29)]),
        ("0 0 * * 5#2", [utc(2024, 1, 12), utc(2024, 2, 9)]),
        ("0 0 * * L5", [utc(2024, 1, 26), utc(2024, 2, 23)]),
        ("0 9 * * mon-fri", [utc(2024, 1, 1, 9), utc(2024, 1, 2, 9)]),
        ("0 0 1 JAN,jul *", [utc(2024, 7, 1), utc(2025, 1, 1)]),
        ("0 0 * * 7", [utc(2024, 1, 7), utc(2024, 1, 14)]),
        ("5/20 * * * *", [utc(2024, 1, 1, 0, 5), utc(2024, 1, 1, 0, 25)]),
        # Both day fields restricted: either matches (OR). 2024-01-01 was a Monday.
        ("0 0 13 * 5", [utc(2024, 1, 5), utc(2024, 1, 12)]),
        # A day field starting with * makes both required (AND): odd days that are Mondays.
        ("0 0 */2 * 1", [utc(2024, 1, 15), utc(2024, 1, 29)]),
    ],
)
def test_dialect(cron, expected):
    assert fire_times(cron, "UTC", START, len(expected)) == expected


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        (utc(2024, 1, 1), [utc(2024, 2, 29), utc(2028, 2, 29)]),
        (utc(2023, 3, 1), [utc(2024, 2, 29), utc(2028, 2, 29)]),
        (utc(2096, 3, 1), [utc(2104, 2, 29)]),  # 2100 is not a leap year
    ],
)
def test_leap_day_fires_only_in_leap_years(after, expected):
    assert fire_times("0 0 29 2 *", "UTC", after, len(expected)) == expected


def test_last_day_of_february_follows_leap_years():
    got = fire_times("0 0 L 2 *", "Europe/Paris", utc(2023, 1, 1), 2)
    assert got == [utc(2023, 2, 27, 23), utc(2024, 2, 28, 23)]


@pytest.mark.parametrize(
    ("cron", "words"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("* * * *", "4 fields"),
        ("* * * * * * *", "7 fields"),
        ("61 * * * *", "minute field: '61' — 61 is out of range 0-59"),
        ("* 24 * * *", "hour field: '24' — 24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month field: '0' — 0 is out of range 1-31"),
        ("* * * 13 *", "month field: '13' — 13 is out of range 1-12"),
        ("* * * * 8", "day-of-week field: '8' — 8 is out of range 0-7"),
        ("* * * * * 60", "second field: '60'"),
        ("*/0 * * * *", "minute field: '*/0' — the step after / must be 1 or more"),
        ("0 22-2 * * *", "runs backwards"),
        ("1,,2 * * * *", "empty list item"),
        ("0 0 ? * *", "Use * instead of ?"),
        ("0 0 15W * *", "(W) is not supported"),
        ("0 0 * * L", "L is allowed alone in day-of-month"),
        ("0 0 L/2 * *", "without ranges or steps"),
        ("0 0 * * 5L-6", "without ranges or steps"),
        ("0 0 * * 5#6", "week number after # must be 1-5"),
        ("0 0 * * 1#2/2", "'#' is allowed in day-of-week only"),
        ("0 0 * * fri-sun", "Sunday is also 7, so write 5-7"),
        ("0 0 * * h", "Hashed values (H) are not supported"),
        ("0 0 * * 1#0", "week number after # must be 1-5"),
        ("1 1 */100 * MON#4", "never fires"),
        ("0 0 * FOO *", "'FOO' — 'foo' is not a number or a name"),
        ("a b c d e", "minute field: 'a' is not valid cron syntax"),
        ("@reboot", "not a time schedule"),
        ("@every_minute", "Unknown alias"),
        ("0 0 31 2 *", "never fires"),
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("* * * * * " + "1," * 120 + "1", "characters long; the limit is 200"),
        ("٣ * * * *", "outside printable ASCII"),
        ("５ * * * *", "outside printable ASCII"),  # noqa: RUF001
        ("* * * * *\n", None),  # trailing whitespace is fine
        ("*\t*\t*\t*\t*", None),
    ],
)
def test_bad_expressions_are_refused_with_a_message_naming_field_and_value(cron, words):
    if words is None:
        validate_cron(cron)
        return
    with pytest.raises(ScheduleError) as caught:
        validate_cron(cron)
    assert caught.value.field == "cron"
    assert words in str(caught.value)


@pytest.mark.parametrize("value", [None, 5, b"* * * * *", ["*"] * 5])
def test_non_text_expressions_are_refused(value):
    with pytest.raises(ScheduleError, match="must be text"):
        validate_cron(value)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("Mars/Olympus_Mons", "Unknown time zone 'Mars/Olympus_Mons'"),
        ("america/new_york", "did you mean 'America/New_York'"),
        ("../../etc/passwd", "is not a time zone name"),
        ("/etc/localtime", "is not a time zone name"),
        ("", "empty"),
        (" UTC", "leading or trailing spaces"),
        ("Europe/Berlin\x00", "is not a time zone name"),
        ("A" * 300, "is not a time zone name"),
    ],
)
def test_bad_time_zones_are_refused_with_a_clear_message(name, words):
    with pytest.raises(ScheduleError) as caught:
        validate_timezone(name)
    assert caught.value.field == "timezone"
    assert words in str(caught.value)


def test_fire_times_raises_value_error_for_every_kind_of_bad_input():
    with pytest.raises(ValueError, match="never fires"):
        fire_times("0 0 30 2 *", "UTC", START, 1)
    with pytest.raises(ValueError, match="Unknown time zone"):
        fire_times("* * * * *", "Nowhere/Special", START, 1)
    with pytest.raises(ValueError, match="timezone-aware"):
        fire_times("* * * * *", "UTC", datetime(2024, 1, 1), 1)
    with pytest.raises(ValueError, match="limit"):
        fire_times("* * * * *", "UTC", START, -1)
    assert fire_times("* * * * *", "UTC", START, 0) == []


def test_schedule_module_imports_without_django_settings_or_celery():
    code = (
        "import sys; from django_cluster_cron.schedule import fire_times;"
        "bad = [m for m in ('django', 'celery', 'redis', 'django_redis') if m in sys.modules];"
        "assert not bad, bad; print('ok')"
    )
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def days(cron: str, count: int, after: datetime = START) -> list[str]:
    return [f"{t:%Y-%m-%d %a %H:%M}" for t in fire_times(cron, "UTC", after, count)]


# 2024-01-01 was a Monday.
@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        # An equal range is its one value (croniter read ``a-a`` as the whole field).
        ("30 2-2 * * *", ["2024-01-01 Mon 02:30", "2024-01-02 Tue 02:30"]),
        ("0 0 * * sun-sun", ["2024-01-07 Sun 00:00", "2024-01-14 Sun 00:00"]),
        ("0 0 1 jan-jan *", ["2025-01-01 Wed 00:00", "2026-01-01 Thu 00:00"]),
        ("5-5 * * * *", ["2024-01-01 Mon 00:05", "2024-01-01 Mon 01:05"]),
        ("0-0/1 * * * *", ["2024-01-01 Mon 01:00", "2024-01-01 Mon 02:00"]),
        # A list is the union of its items, whatever their kinds.
        ("0 0 * * 0-6,sat#3", ["2024-01-02 Tue 00:00", "2024-01-03 Wed 00:00"]),
        ("0 0 * * 0-6,L5", ["2024-01-02 Tue 00:00", "2024-01-03 Wed 00:00"]),
        ("0 0 * * 1-5,L5", ["2024-01-02 Tue 00:00", "2024-01-03 Wed 00:00"]),
        (
            "0 0 * * 1,2,3#1",
            ["2024-01-02 Tue 00:00", "2024-01-03 Wed 00:00", "2024-01-08 Mon 00:00"],
        ),
        # A step larger than its field gives the start value alone (Vixie cron): with 1-7 and the
        # AND rule (the field starts with *), the first Monday of each month.
        ("1 1 */100,1-7 * MON", ["2024-01-01 Mon 01:01", "2024-02-05 Mon 01:01"]),
        ("*/100 * * * *", ["2024-01-01 Mon 01:00", "2024-01-01 Mon 02:00"]),
        ("0 0 31/40 * *", ["2024-01-31 Wed 00:00", "2024-03-31 Sun 00:00"]),
        # Day-of-week steps run over 0-7 as written, 7 being Sunday (Vixie cron, cronsim).
        ("0 0 * * 7/2", ["2024-01-07 Sun 00:00", "2024-01-14 Sun 00:00"]),
        ("0 0 * * 6/1", ["2024-01-06 Sat 00:00", "2024-01-07 Sun 00:00", "2024-01-13 Sat 00:00"]),
        (
            "0 0 * * 5/1",
            ["2024-01-05 Fri 00:00", "2024-01-06 Sat 00:00", "2024-01-07 Sun 00:00"],
        ),
        ("0 0 * * */2", ["2024-01-02 Tue 00:00", "2024-01-04 Thu 00:00", "2024-01-06 Sat 00:00"]),
        ("0 0 * * 1-7/3", ["2024-01-04 Thu 00:00", "2024-01-07 Sun 00:00", "2024-01-08 Mon 00:00"]),
        # Last weekday of the month, either spelling, and with a restricted day-of-month (OR).
        ("0 0 * * 5L", ["2024-01-26 Fri 00:00", "2024-02-23 Fri 00:00"]),
        ("0 0 * * L5", ["2024-01-26 Fri 00:00", "2024-02-23 Fri 00:00"]),
        ("0 0 * * friL", ["2024-01-26 Fri 00:00", "2024-02-23 Fri 00:00"]),
        ("0 0 * * 7L", ["2024-01-28 Sun 00:00", "2024-02-25 Sun 00:00"]),
        ("0 0 15 * 5L", ["2024-01-15 Mon 00:00", "2024-01-26 Fri 00:00", "2024-02-15 Thu 00:00"]),
        ("0 0 1 * 5#2", ["2024-01-12 Fri 00:00", "2024-02-01 Thu 00:00", "2024-02-09 Fri 00:00"]),
        ("0 0 L,15 2 *", ["2024-02-15 Thu 00:00", "2024-02-29 Thu 00:00"]),
    ],
)
def test_every_spelling_fires_as_the_dialect_says(cron, expected):
    assert days(cron, len(expected)) == expected


def test_the_two_spellings_of_last_weekday_and_names_and_numbers_are_the_same_schedule():
    after = datetime(2020, 1, 1, tzinfo=UTC)
    for a, b in [("0 0 * * 5L", "0 0 * * L5"), ("0 0 * * fri#2", "0 0 * * 5#2")]:
        assert fire_times(a, "Europe/Berlin", after, 40) == fire_times(
            b, "Europe/Berlin", after, 40
        )


def test_a_day_name_with_l_is_the_last_such_day_of_the_month() -> None:
    """``MONL`` reads as ``1L`` (documented beside ``5L``): the last Monday of each month."""
    after = datetime(2026, 12, 1, tzinfo=timezone.utc)
    expected = fire_times("0 0 * * 1L", "UTC", after, 3)
    assert fire_times("0 0 * * MONL", "UTC", after, 3) == expected
    assert fire_times("0 0 * * monL", "UTC", after, 3) == expected
    assert [t.day for t in expected] == [28, 25, 22]  # Dec 2026, Jan and Feb 2027
