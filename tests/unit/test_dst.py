"""The DST rules of docs/how-to/time-zones.md, in several zones (one with a 30-minute shift, one
southern, one that jumps at midnight)."""

from datetime import datetime, timezone

import pytest

from django_cluster_cron.schedule import fire_times

UTC = timezone.utc


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "zone", "after", "expected"),
    [
        # A wall time in the spring-forward gap fires once, at the first instant after.
        (
            "30 2 * * *",
            "America/New_York",
            utc(2024, 3, 9, 12),
            [utc(2024, 3, 10, 7), utc(2024, 3, 11, 6, 30)],
        ),
        (
            "0 2 * * *",
            "Europe/Berlin",
            utc(2024, 3, 30, 12),
            [utc(2024, 3, 31, 1), utc(2024, 4, 1, 0)],
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            utc(2024, 3, 30, 12),
            [utc(2024, 3, 31, 1), utc(2024, 4, 1, 0, 30)],
        ),
        # Lord Howe Island moves by 30 minutes: 02:00 -> 02:30 local on 2024-10-06.
        (
            "0 2 * * *",
            "Australia/Lord_Howe",
            utc(2024, 10, 5),
            [utc(2024, 10, 5, 15, 30), utc(2024, 10, 6, 15)],
        ),
        (
            "15 2 * * *",
            "Australia/Lord_Howe",
            utc(2024, 10, 5),
            [utc(2024, 10, 5, 15, 30), utc(2024, 10, 6, 15, 15)],
        ),
        # Southern hemisphere: Sydney springs forward 02:00 -> 03:00 on 2024-10-06.
        (
            "30 2 * * *",
            "Australia/Sydney",
            utc(2024, 10, 5),
            [utc(2024, 10, 5, 16), utc(2024, 10, 6, 15, 30)],
        ),
        # Santiago springs forward at midnight: 00:00 does not exist on 2024-09-08.
        (
            "0 0 * * *",
            "America/Santiago",
            utc(2024, 9, 7, 12),
            [utc(2024, 9, 8, 4), utc(2024, 9, 9, 3)],
        ),
    ],
)
def test_a_wall_time_in_a_gap_fires_once_at_the_end_of_the_gap(cron, zone, after, expected):
    assert fire_times(cron, zone, after, len(expected)) == expected


def test_several_slots_inside_one_gap_collapse_into_one_run():
    # 02:00, 02:15, 02:30 and 02:45 all fall in New York's gap: one run at 03:00 EDT.
    got = fire_times("*/15 2,3 * * *", "America/New_York", utc(2024, 3, 10, 6, 50), 3)
    assert got == [utc(2024, 3, 10, 7), utc(2024, 3, 10, 7, 15), utc(2024, 3, 10, 7, 30)]


@pytest.mark.parametrize(
    ("cron", "zone", "after", "expected"),
    [
        # A repeated wall time of a fixed-hour job fires once, at its first occurrence.
        (
            "30 1 * * *",
            "America/New_York",
            utc(2024, 11, 2, 12),
            [utc(2024, 11, 3, 5, 30), utc(2024, 11, 4, 6, 30)],
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            utc(2024, 10, 26, 12),
            [utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30)],
        ),
        # Lord Howe falls back 02:00 -> 01:30 on 2024-04-07: 01:45 happens twice, fires once.
        (
            "45 1 * * *",
            "Australia/Lord_Howe",
            utc(2024, 4, 6),
            [utc(2024, 4, 6, 14, 45), utc(2024, 4, 7, 15, 15)],
        ),
        (
            "30 2 * * *",
            "Australia/Sydney",
            utc(2024, 4, 6),
            [utc(2024, 4, 6, 15, 30), utc(2024, 4, 7, 16, 30)],
        ),
    ],
)
def test_a_repeated_wall_time_of_a_fixed_job_fires_only_at_its_first_occurrence(
    cron, zone, after, expected
):
    assert fire_times(cron, zone, after, len(expected)) == expected


def test_after_inside_the_second_pass_does_not_refire_a_fixed_job():
    # 06:10Z is 01:10 EST, the second pass of 01:xx; 01:30 already fired at 05:30Z.
    assert fire_times("30 1 * * *", "America/New_York", utc(2024, 11, 3, 6, 10), 1) == [
        utc(2024, 11, 4, 6, 30)
    ]


@pytest.mark.parametrize(
    ("cron", "zone", "after", "expected"),
    [
        # A job whose hour is * runs every real hour through the repeat.
        (
            "0 * * * *",
            "America/New_York",
            utc(2024, 11, 3, 4, 30),
            [utc(2024, 11, 3, 5), utc(2024, 11, 3, 6), utc(2024, 11, 3, 7)],
        ),
        (
            "0 * * * *",
            "Europe/Berlin",
            utc(2024, 10, 26, 23, 30),
            [utc(2024, 10, 27, 0), utc(2024, 10, 27, 1), utc(2024, 10, 27, 2)],
        ),
        (
            "0,30 * * * *",
            "Australia/Lord_Howe",
            utc(2024, 4, 6, 14, 10),
            [utc(2024, 4, 6, 14, 30), utc(2024, 4, 6, 15), utc(2024, 4, 6, 15, 30)],
        ),
        # ... and every real hour through the gap (no extra run for the vanished 02:00).
        (
            "0 * * * *",
            "America/New_York",
            utc(2024, 3, 10, 5, 30),
            [utc(2024, 3, 10, 6), utc(2024, 3, 10, 7), utc(2024, 3, 10, 8)],
        ),
    ],
)
def test_a_job_with_a_wildcard_hour_follows_real_time(cron, zone, after, expected):
    assert fire_times(cron, zone, after, len(expected)) == expected


def test_a_wildcard_job_started_inside_the_repeat_continues_in_real_time():
    # 06:10Z is 01:10 EST (second pass): next are 01:20 EST and 01:40 EST, then 02:00 EST.
    got = fire_times("*/20 * * * *", "America/New_York", utc(2024, 11, 3, 6, 10), 3)
    assert got == [utc(2024, 11, 3, 6, 20), utc(2024, 11, 3, 6, 40), utc(2024, 11, 3, 7)]


def test_a_minute_wildcard_inside_a_fixed_hour_skips_the_gap_like_vixie_cron():
    # ``*/30 2`` is a wildcard job (minute starts with *): 02:xx never happens on the gap day.
    got = fire_times("*/30 2 * * *", "America/New_York", utc(2024, 3, 10, 5), 2)
    assert got == [utc(2024, 3, 11, 6), utc(2024, 3, 11, 6, 30)]


def test_every_second_job_is_continuous_across_fall_back():
    got = fire_times("* * * * * *", "America/New_York", utc(2024, 11, 3, 5, 59, 58), 4)
    assert got == [
        utc(2024, 11, 3, 5, 59, 59),
        utc(2024, 11, 3, 6),
        utc(2024, 11, 3, 6, 0, 1),
        utc(2024, 11, 3, 6, 0, 2),
    ]


def test_zones_without_dst_map_wall_time_directly():
    assert fire_times("30 5 * * *", "Asia/Kolkata", utc(2023, 12, 31, 12), 1) == [
        utc(2024, 1, 1, 0)
    ]
    assert fire_times("0 0 1 1 *", "UTC", utc(2024, 6, 1), 1) == [utc(2025, 1, 1)]


def test_results_are_aware_utc_and_strictly_after_the_given_instant():
    after = datetime(2024, 5, 1, 12, 0, 0, 1, tzinfo=UTC)
    got = fire_times("0 12 * * *", "UTC", after, 1)
    assert got == [utc(2024, 5, 2, 12)]
    assert got[0].tzinfo is UTC
    exact = fire_times("0 12 * * *", "UTC", utc(2024, 5, 1, 12), 1)
    assert exact == [utc(2024, 5, 2, 12)]


def test_dst_notes_explain_moved_and_repeated_fire_times():
    from django_cluster_cron.schedule import CronSchedule

    spring = CronSchedule.parse("30 2 * * *", "America/New_York")
    assert "moved" in (spring.dst_note(utc(2024, 3, 10, 7)) or "")
    assert spring.dst_note(utc(2024, 3, 11, 6, 30)) is None
    fall = CronSchedule.parse("30 1 * * *", "America/New_York")
    assert "runs at the first only" in (fall.dst_note(utc(2024, 11, 3, 5, 30)) or "")
    hourly = CronSchedule.parse("0 * * * *", "America/New_York")
    assert (hourly.dst_note(utc(2024, 11, 3, 5)) or "").startswith("first pass")
    assert (hourly.dst_note(utc(2024, 11, 3, 6)) or "").startswith("second pass")
    assert hourly.dst_note(utc(2024, 11, 3, 7)) is None
    # A fire time that lands right after the gap by its own rule is not "moved".
    three = CronSchedule.parse("0 3 * * *", "America/New_York")
    assert three.dst_note(utc(2024, 3, 10, 7)) is None
