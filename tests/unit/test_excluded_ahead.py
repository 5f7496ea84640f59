"""The next dates a schedule's exclusions leave out, however far beyond its next few fire times:
what the previews (the admin's and the API's) show."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from django_cluster_cron.core.exclusions import ExcludingSchedule
from django_cluster_cron.schedule import parse

UTC = timezone.utc
pytest.importorskip("holidays")


def ahead(expression, zone, rules, after, until=None, at_least=3):
    schedule = parse(expression, zone, exclusions=rules)
    assert isinstance(schedule, ExcludingSchedule)
    return schedule.excluded_ahead(after, until or after, at_least)


def test_an_every_minute_job_is_told_its_next_public_holidays_months_ahead():
    after = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    started = time.monotonic()
    found = ahead("* * * * *", "America/New_York", ["holidays:US"], after)
    assert time.monotonic() - started < 2  # not half a million fire times walked
    assert [reason for _, reason in found] == [
        "2026-06-19: Juneteenth National Independence Day (US)",
        "2026-07-03: Independence Day (observed) (US)",
        "2026-07-04: Independence Day (US)",
    ]
    # Each with the first run it leaves out: that day's first minute, in the job's zone.
    assert found[0][0] == datetime(2026, 6, 19, 4, 0, tzinfo=UTC)


def test_only_dates_the_schedule_fires_on_are_named():
    # Weekdays at 9:00: a holiday on a Saturday leaves no run out.
    after = datetime(2026, 6, 1, tzinfo=UTC)
    found = ahead("0 9 * * mon-fri", "America/New_York", ["holidays:US"], after)
    assert [reason[:10] for _, reason in found] == ["2026-06-19", "2026-07-03", "2026-09-07"]
    assert all(fire.astimezone(UTC).hour == 13 for fire, _ in found)


def test_every_excluded_date_up_to_until_is_named_and_at_least_the_number_asked_beyond():
    after = datetime(2026, 12, 20, tzinfo=UTC)
    rules = ["2026-12-24", "2026-12-28..2026-12-31", "2027-03-01"]
    until = datetime(2026, 12, 31, 9, tzinfo=UTC)  # the last of the runs a preview lists
    found = ahead("0 9 * * *", "UTC", rules, after, until=until, at_least=6)
    assert [reason for _, reason in found] == [
        "2026-12-24: an excluded date",
        "2026-12-28: in the excluded range 2026-12-28..2026-12-31",
        "2026-12-29: in the excluded range 2026-12-28..2026-12-31",
        "2026-12-30: in the excluded range 2026-12-28..2026-12-31",
        "2026-12-31: in the excluded range 2026-12-28..2026-12-31",
        "2027-03-01: an excluded date",
    ]
    assert len(ahead("0 9 * * *", "UTC", rules, after, until=until, at_least=2)) == 5
    assert ahead("0 9 * * *", "UTC", rules, after, at_least=2)[-1][1].startswith("2026-12-28")


def test_today_counts_only_from_now_and_a_past_rule_not_at_all():
    after = datetime(2026, 12, 24, 10, 0, tzinfo=UTC)
    rules = ["2026-12-01", "2026-12-24", "2026-12-25"]
    found = ahead("0 9,12 * * *", "UTC", rules, after, at_least=5)
    assert [(fire, reason[:10]) for fire, reason in found] == [
        (datetime(2026, 12, 24, 12, 0, tzinfo=UTC), "2026-12-24"),
        (datetime(2026, 12, 25, 9, 0, tzinfo=UTC), "2026-12-25"),
    ]


def test_a_schedule_that_ends_names_no_excluded_date_after_its_last_fire_time():
    found = ahead(
        "@at 2026-12-24T09:00",
        "UTC",
        ["2026-12-24", "2027-01-01"],
        datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert [reason for _, reason in found] == ["2026-12-24: an excluded date"]


def test_a_range_of_years_against_a_yearly_job_is_cheap():
    started = time.monotonic()
    found = ahead(
        "0 0 1 1 *", "UTC", ["2026-01-02..2035-12-31"], datetime(2026, 1, 1, 1, tzinfo=UTC)
    )
    assert time.monotonic() - started < 2
    assert [fire.year for fire, _ in found] == [2027, 2028, 2029]
    assert found[0][0] - datetime(2026, 1, 1, 1, tzinfo=UTC) < timedelta(days=366)
