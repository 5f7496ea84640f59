"""The ledger's size without counting it: the total from the database's statistics, each status
counted up to a cap, measured by the leader's pruning pass and shown from its report on the run
list, whose own statements never count the ledger whole; where no leader reports, a page starts
the count on a thread and keeps it in the cache, and the next pages show it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from django_cluster_cron.ledger import counts
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from django_cluster_cron.ops.status import ledger_counts
from tests.support.inprocess import Clock
from tests.support.querycount import count_queries
from tests.support.statistics import analyze
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def make_runs(statuses):
    job = JobDefinition(
        name=f"job-{uuid.uuid4().hex[:8]}", cron="* * * * *", task="tests.add", args=[1, 2]
    )
    job.enabled = False  # paused: a leader in the test records none of its slots
    job.full_clean()
    job.save()
    now = timezone.now()
    JobRun.objects.bulk_create(
        JobRun(
            job=job,
            scheduled_for=now - timedelta(minutes=i + 1),
            status=status,
            trigger=RunTrigger.SCHEDULE,
            task_id=f"t-{uuid.uuid4().hex}",
        )
        for i, status in enumerate(statuses)
    )
    return job


def test_each_status_is_counted_up_to_the_cap_and_the_total_comes_from_statistics():
    make_runs([RunStatus.SUCCESS] * 30 + [RunStatus.FAILED] * 2 + [RunStatus.QUEUED])
    assert counts.status_counts(cap=10) == {"success": 11, "failed": 2, "queued": 1}
    analyze(JobRun._meta.db_table)
    total = counts.estimated_total()
    assert total is not None
    assert 16 <= total <= 66, total  # an estimate (InnoDB's is one): within a factor of two


@pytest.mark.parametrize("lease_kind", ["database"])
def test_the_run_list_shows_the_leaders_count_and_counts_nothing_whole(
    make_scheduler, settings, admin_client
):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "PRUNE_INTERVAL": 0.05}
    make_runs([RunStatus.SUCCESS] * 12 + [RunStatus.FAILED] * 3)
    analyze(JobRun._meta.db_table)
    scheduler = make_scheduler("node-a", Clock(timezone.now()))

    def reported():
        scheduler.step()
        found = ledger_counts()
        return found if found and found.get("by_status") else None

    found = wait_for(reported, timeout=60, what="the leader's report of the ledger's size")
    assert found["by_status"] == {"success": 12, "failed": 3}
    with count_queries() as queries:
        page = admin_client.get(reverse("admin:django_cluster_cron_jobrun_changelist"))
    html = page.content.decode()
    assert "12 success, 3 failed (counted " in html
    assert "Failed (3)" in html  # the status filter, from the same measurement
    for text, _ in queries.queries:
        if "COUNT(" in text.upper():
            assert "LIMIT" in text.upper(), text  # the list's own count is capped
    scheduler.sweeps.pruner.join(30)


def test_with_no_leader_a_page_starts_the_count_and_later_pages_show_it(admin_client, redis_client):
    make_runs([RunStatus.SUCCESS] * 4 + [RunStatus.FAILED] * 2)
    url = reverse("admin:django_cluster_cron_jobrun_changelist")

    def shown():
        with count_queries() as queries:
            html = admin_client.get(url).content.decode()
        for text, _ in queries.queries:  # the page's own statements: no count of the ledger
            assert "COUNT(" not in text.upper() or "LIMIT" in text.upper(), text
        return html if "4 success, 2 failed (counted " in html else None

    html = wait_for(shown, timeout=60, what="the run list's count of the ledger")
    assert "Failed (2)" in html
    assert "Success (4)" in html
    # The count is cached: a run added now shows once the count is a minute old, not before.
    make_runs([RunStatus.FAILED])
    assert "Failed (2)" in admin_client.get(url).content.decode()


def test_the_size_line_and_the_status_filters_counts_in_words():
    from django_cluster_cron.admin.display import ledger_size, status_count

    found = {
        "total": 3_012_400,
        "by_status": {"failed": 1_204, "success": 100_001},
        "cap": 100_000,
        "at": 1_000.0,
    }
    assert ledger_size(found, now=1_040.0) == (
        "About 3,012,400 runs: 100,000+ success, 1,204 failed (counted 40 s ago)"
    )
    assert ledger_size(found, now=1_000.0 + 600).endswith("(counted 10 min ago)")
    assert (status_count(found, "success"), status_count(found, "failed")) == ("100,000+", "1,204")
    assert status_count(found, "queued") == "0"
    assert status_count(None, "failed") == ""
    assert ledger_size(None) == ""
