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
        ("*/0 * * * *", "step 0 must be 1-59"),
        ("0 22-2 * * *", "runs backwards"),
        ("1,,2 * * * *", "empty list item"),
        ("0 0 ? * *", "Use * instead of ?"),
        ("0 0 15W * *", "(W) is not supported"),
        ("0 0 * * 5L", "L is allowed"),
        ("0 0 * * 5#6", "week number after # must be 1-5"),
        ("0 0 1 * 5#2", "need day-of-month '*'"),
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
