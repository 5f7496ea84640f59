"""The daily summaries as the pages read them: the leader sums up each ended day once (fenced,
equal to the day's runs), the jobs list's success rate reads the summaries in one query whatever
the ledger holds, and a job's daily chart joins the summaries to the live ledger for the days not
yet summed up, so pruning erases no day of the trend."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, cast

import pytest
from django.urls import reverse

from django_cluster_cron.ledger import retention, summaries
from django_cluster_cron.ledger.fence import Fence, FencedOut
from django_cluster_cron.models import JobRun, RunStatus, RunSummary, RunTrigger
from django_cluster_cron.scheduler.pruning import Pruner
from tests.database.test_retention import make_job
from tests.support.querycount import count_queries

pytestmark = pytest.mark.django_db(transaction=True)

# Mid-morning UTC: the day before has been over for more than an hour.
NOW = datetime.now(timezone.utc).replace(hour=10, minute=30, second=0, microsecond=0)
TODAY = NOW.date()


def runs_on(job, days_ago, statuses, *, hour=6):
    """One run of each status in ``statuses``, a minute apart, on the day ``days_ago`` before
    today at ``hour`` UTC."""
    start = NOW.replace(hour=hour, minute=0) - timedelta(days=days_ago)
    JobRun.objects.bulk_create(
        JobRun(
            job=job,
            scheduled_for=start + timedelta(minutes=i),
            status=status,
            trigger=RunTrigger.SCHEDULE,
            task_id=f"t-{uuid.uuid4().hex}",
            duration=timedelta(seconds=i + 1),
        )
        for i, status in enumerate(statuses)
    )
    # Recorded before the test's clock: none counts as added to a day after its summary.
    JobRun.objects.filter(job=job).update(created_at=NOW - timedelta(hours=2))


def by_status(summary: RunSummary) -> dict[str, int]:
    return {s: getattr(summary, s) for s in summaries.COUNTED if getattr(summary, s)}


def test_ended_days_are_the_last_seven_over_for_an_hour():
    assert summaries.ended_days(NOW)[-1] == TODAY - timedelta(days=1)
    assert len(summaries.ended_days(NOW)) == summaries.DAYS_BACK
    just_after_midnight = NOW.replace(hour=0, minute=30)
    assert summaries.ended_days(just_after_midnight)[-1] == TODAY - timedelta(days=2)


def test_the_leader_sums_up_each_ended_day_once_equal_to_its_runs():
    a, b = make_job(), make_job()
    runs_on(a, 1, ["success", "success", "failed"])
    runs_on(b, 1, ["skipped", "success"])
    runs_on(a, 3, ["missed", "queued"])  # a run still waiting when its day is summed up
    runs_on(a, 0, ["success"])  # today: not over yet
    runs_on(a, 9, ["success"])  # beyond the days the leader looks back on
    pruner = Pruner(term=cast(Any, None), clock=lambda: NOW)
    fence = Fence.claim("node-a", "token-a")
    for _ in range(summaries.DAYS_BACK):
        pruner.sum_up_a_day(fence, NOW)
    found = {(s.job_id, s.day): by_status(s) for s in RunSummary.objects.all()}
    yesterday, three_ago = TODAY - timedelta(days=1), TODAY - timedelta(days=3)
    assert found == {
        (a.pk, yesterday): {"success": 2, "failed": 1},
        (b.pk, yesterday): {"skipped": 1, "success": 1},
        (a.pk, three_ago): {"missed": 1, "unfinished": 1},
    }
    # Equal to what the day's runs sum up to, percentiles included.
    again = {s.job_id: s for s in summaries.summarise([a.pk, b.pk], yesterday, now=NOW)}
    for summary in RunSummary.objects.filter(day=yesterday):
        mine = again[summary.job_id]
        assert (summary.duration_p50, summary.duration_p95) == (
            mine.duration_p50,
            mine.duration_p95,
        )
    # Every ended day is done: a further pass looks at no run.
    with count_queries() as log:
        pruner.sum_up_a_day(fence, NOW)
    assert len(log) == 0
    # A pruning pass later keeps the summary as it was: the day is not summed up twice.
    JobRun.objects.filter(job=a, status="queued").update(status=RunStatus.SUCCESS)
    retention.prune(now=NOW + timedelta(days=200), limit=1000)
    assert by_status(RunSummary.objects.get(job=a, day=three_ago)) == {
        "missed": 1,
        "unfinished": 1,
    }


def test_a_deposed_leader_sums_up_nothing():
    job = make_job()
    runs_on(job, summaries.DAYS_BACK, ["success"])  # the oldest ended day: the first summed up
    old = Fence.claim("old-node", "old-token")
    Fence.claim("new-node", "new-token")
    pruner = Pruner(term=cast(Any, None), clock=lambda: NOW)
    with pytest.raises(FencedOut):
        pruner.sum_up_a_day(old, NOW)
    assert not RunSummary.objects.exists()


def test_trends_read_the_summaries_of_the_days_before_today_in_one_query():
    jobs = [make_job() for _ in range(5)]
    for back in range(1, 40):
        RunSummary.objects.bulk_create(
            RunSummary(
                job=job, day=TODAY - timedelta(days=back), success=9, failed=1, summed_at=NOW
            )
            for job in jobs[:4]
        )
    RunSummary.objects.create(job=jobs[0], day=TODAY, success=1000, summed_at=NOW)
    with count_queries() as log:
        found = summaries.trends([job.pk for job in jobs], days=30, now=NOW)
    assert len(log) == 1
    assert set(found) == {job.pk for job in jobs[:4]}
    trend = found[jobs[0].pk]
    assert (trend.days, trend.counts["success"], trend.counts["failed"]) == (30, 270, 30)
    assert trend.success_rate == 0.9


def test_a_jobs_daily_history_joins_the_summaries_to_the_live_ledger():
    job = make_job()
    RunSummary.objects.create(
        job=job, day=TODAY - timedelta(days=40), success=50, failed=2, summed_at=NOW
    )
    RunSummary.objects.create(job=job, day=TODAY - timedelta(days=1), success=7, summed_at=NOW)
    runs_on(job, 1, ["failed"])  # summed up already: the summary speaks for the day
    runs_on(job, 0, ["success", "failed", "running"])  # today, live
    runs_on(job, 2, ["skipped"])  # no summary yet, within the live days
    runs_on(job, 5, ["success"])  # no summary and too old to count live: a gap
    found = summaries.daily(job.pk, days=90, now=NOW)
    assert found == {
        TODAY - timedelta(days=40): {
            "success": 50,
            "failed": 2,
            **dict.fromkeys(("skipped", "missed", "cancelled", "uncertain", "unfinished"), 0),
        },
        TODAY - timedelta(days=2): {"skipped": 1},
        TODAY - timedelta(days=1): {
            "success": 7,
            **dict.fromkeys(
                ("failed", "skipped", "missed", "cancelled", "uncertain", "unfinished"), 0
            ),
        },
        TODAY: {"success": 1, "failed": 1, "unfinished": 1},
    }


def test_the_jobs_list_shows_the_rate_of_30_days_after_the_runs_are_pruned(admin_client):
    job = make_job()
    for back in range(1, 31):
        runs_on(job, back, ["success"] * 3 + ["failed"])
    # The leader sums up; then every run of those days is pruned.
    for day in range(1, 31):
        summaries.sum_up_day(TODAY - timedelta(days=day), now=NOW)
    retention.prune(now=NOW + timedelta(days=200), limit=10_000, keep_last=0)
    assert not JobRun.objects.filter(job=job).exists()
    page = admin_client.get(reverse("admin:django_cluster_cron_jobdefinition_changelist"))
    assert "30 days: 75.0% of 120" in page.content.decode()
    detail = admin_client.get(
        reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    ).content.decode()
    assert "dcc-daily" in detail
    shown_day = TODAY - timedelta(days=3)
    assert f"{shown_day:%Y-%m-%d}: 3 success, 1 failed (4 runs)" in detail


def test_the_jobs_list_reads_no_more_with_a_year_of_summaries(admin_client):
    jobs = [make_job() for _ in range(3)]

    def queries() -> int:
        with count_queries() as log:
            admin_client.get(reverse("admin:django_cluster_cron_jobdefinition_changelist"))
        return len(log)

    before = queries()
    RunSummary.objects.bulk_create(
        RunSummary(job=job, day=TODAY - timedelta(days=back), success=1, summed_at=NOW)
        for job in jobs
        for back in range(1, 366)
    )
    assert queries() == before
