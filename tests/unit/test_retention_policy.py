"""The retention policy, pure: how the project's periods, its per-status ones and a job's own
combine; ``keep_last`` as one number or per status; refusals naming the status and value."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from django_cluster_cron.core.retention import (
    FINAL,
    RetentionError,
    parse_days,
    parse_keep_last,
    resolve,
)

NOW = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)


def test_the_project_default_with_failures_kept_longer():
    policy = resolve(default_days=30)
    assert {s: policy.days[s] for s in FINAL} == {
        "success": 30,
        "failed": 90,
        "skipped": 30,
        "missed": 30,
        "cancelled": 30,
        "uncertain": 90,
    }
    assert policy.cutoff("success", NOW) == NOW - timedelta(days=30)
    assert policy.keep("failed") == 0
    # A longer default is not shortened for failures.
    assert resolve(default_days=120).days["failed"] == 120


def test_per_status_then_the_jobs_own_go_over_the_default():
    policy = resolve(
        default_days=30,
        by_status={"skipped": 7, "failed": 365},
        keep_last={"failed": 50},
        job_days={"failed": None, "success": 400},
        job_keep_last=3,
    )
    assert policy.days["skipped"] == 7
    assert policy.days["success"] == 400
    assert policy.cutoff("failed", NOW) is None  # kept for ever
    assert policy.longest() is None
    assert {policy.keep(s) for s in FINAL} == {3}


def test_described_in_words_statuses_kept_alike_together():
    assert resolve(default_days=30, keep_last=10).describe() == (
        "success, skipped, missed, cancelled: 30 days; failed, uncertain: 90 days; "
        "the newest 10 of each kept however old"
    )
    assert resolve(
        default_days=1, by_status={"failed": None}, keep_last={"failed": 5}
    ).describe() == (
        "success, skipped, missed, cancelled: 1 day; failed: kept for ever; uncertain: 90 days; "
        "kept however old: the newest 5 failed"
    )


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"queued": 3}, "'queued' is not a final run status"),
        ({"success": 0}, "from 1 to 36,500"),
        ({"success": True}, "got True"),
        ({"success": 2.5}, "got 2.5"),
        ("30", "Give an object of final statuses and days"),
    ],
)
def test_bad_periods_are_refused_naming_what_is_wrong(value, words):
    with pytest.raises(RetentionError, match=words):
        parse_days(value)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (-1, "from 0 to 100,000"),
        (True, "Give a number of runs kept per status"),
        ({"failed": "5"}, "got '5'"),
        ({"running": 1}, "'running' is not a final run status"),
    ],
)
def test_bad_counts_are_refused_naming_what_is_wrong(value, words):
    with pytest.raises(RetentionError, match=words):
        parse_keep_last(value)


def test_nothing_means_the_projects():
    assert parse_days(None) == {}
    assert parse_keep_last(None) == {}
    assert parse_keep_last(4) == dict.fromkeys(FINAL, 4)


def test_the_final_statuses_are_the_ledgers():
    from django_cluster_cron.models import FINAL_STATUSES

    assert set(FINAL) == {str(status) for status in FINAL_STATUSES}
