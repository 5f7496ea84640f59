"""Retention and pruning on the database: periods per final status, ``keep_last``, a job's own
overrides, the daily summary written before a day's first run goes (and equal to the runs it
sums up), the leader's pass fenced, ``prune_runs`` (dry run, archive, a failed batch), every
column the deletes use indexed, and runs waiting or running never pruned."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, cast

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import connection

from django_cluster_cron.ledger import retention, summaries
from django_cluster_cron.ledger.fence import Fence, FencedOut
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunSummary, RunTrigger
from django_cluster_cron.scheduler.pruning import Pruner
from tests.support.querycount import count_queries
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture(autouse=True)
def _project_retention(settings):
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "RUN_RETENTION_DAYS": 30,
        "RUN_RETENTION": {"skipped": 7},
        "RUN_KEEP_LAST": 0,
    }


def make_job(**fields) -> JobDefinition:
    job = JobDefinition(
        name=f"job-{uuid.uuid4().hex[:8]}", cron="* * * * *", task="tests.add", args=[1, 2]
    )
    for field, value in fields.items():
        setattr(job, field, value)
    job.full_clean()
    job.save()
    return job


_seconds = itertools.count()


def add(job, status, days_ago, count=1, *, minutes=0, **fields):
    """``count`` runs of ``job`` a minute apart, the first ``days_ago`` days before now (a few
    seconds later each call: a slot is one run)."""
    first = NOW - timedelta(days=days_ago, minutes=minutes) + timedelta(seconds=next(_seconds) % 50)
    runs = [
        JobRun(
            job=job,
            scheduled_for=first + timedelta(minutes=i),
            status=status,
            trigger=RunTrigger.SCHEDULE,
            task_id=f"t-{uuid.uuid4().hex}",
            **fields,
        )
        for i in range(count)
    ]
    JobRun.objects.bulk_create(runs)
    return runs


def left(job):
    return Counter(JobRun.objects.filter(job=job).values_list("status", flat=True))


def prune(**options):
    done = retention.Pruned()
    while True:
        pruned = retention.prune(now=NOW, limit=options.pop("limit", 1000), **options)
        done.add(pruned)
        if not pruned.full:
            return done


def test_each_final_status_keeps_its_own_period_and_active_runs_are_never_pruned():
    job = make_job()
    for status in RunStatus.values:
        add(job, status, days_ago=400)
    add(job, RunStatus.SKIPPED, days_ago=10)  # past skipped's 7 days
    add(job, RunStatus.SUCCESS, days_ago=10)  # within success's 30
    add(job, RunStatus.FAILED, days_ago=60)  # within failed's 90 (the project's floor)
    pruned = prune()
    assert pruned.by_status == {
        s: 1 for s in ("success", "failed", "skipped", "missed", "cancelled", "uncertain")
    } | {"skipped": 2}
    assert left(job) == {
        "pending": 1,
        "buffered": 1,
        "queued": 1,
        "running": 1,
        "retrying": 1,
        "terminating": 1,
        "success": 1,
        "failed": 1,
    }


def test_keep_last_keeps_the_newest_of_each_status_however_old():
    monthly = make_job(keep_last=3)
    add(monthly, RunStatus.SUCCESS, days_ago=400, count=5)
    add(monthly, RunStatus.FAILED, days_ago=300, count=2)
    newest = list(
        JobRun.objects.filter(job=monthly, status=RunStatus.SUCCESS)
        .order_by("-scheduled_for")
        .values_list("pk", flat=True)[:3]
    )
    assert prune().runs == 2
    kept = JobRun.objects.filter(job=monthly, status=RunStatus.SUCCESS)
    assert sorted(kept.values_list("pk", flat=True)) == sorted(newest)
    assert left(monthly)[RunStatus.FAILED] == 2  # fewer than 3: all kept


def test_keep_last_per_status_and_the_project_default(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "RUN_KEEP_LAST": {"failed": 2}}
    plain = make_job()
    own = make_job(keep_last={"success": 1})
    for job in (plain, own):
        add(job, RunStatus.SUCCESS, days_ago=400, count=3)
        add(job, RunStatus.FAILED, days_ago=400, count=3)
    prune()
    assert left(plain) == {"failed": 2}
    assert left(own) == {"success": 1, "failed": 2}


def test_a_jobs_own_periods_go_over_the_projects_and_null_keeps_for_ever():
    plain = make_job()
    long = make_job(retention={"success": 365, "failed": None})
    short = make_job(retention={"success": 1})
    for job in (plain, long, short):
        add(job, RunStatus.SUCCESS, days_ago=100)
        add(job, RunStatus.SUCCESS, days_ago=2)
        add(job, RunStatus.FAILED, days_ago=1000)
    prune()
    assert left(plain) == {"success": 1}
    assert left(long) == {"success": 2, "failed": 1}
    assert left(short) == {}


def test_bad_retention_is_refused_on_its_field_with_what_is_wrong():
    for field, value, words in [
        ("retention", {"running": 3}, "'running' is not a final run status"),
        ("retention", {"success": 0}, "from 1 to 36,500"),
        ("retention", {"success": "7"}, "got '7'"),
        ("retention", [7], "Give an object of final statuses and days"),
        ("keep_last", -1, "from 0 to 100,000"),
        ("keep_last", {"sucess": 3}, "'sucess' is not a final run status"),
        ("keep_last", "ten", "Give a number of runs kept per status"),
    ]:
        job = JobDefinition(
            name="bad", cron="* * * * *", task="tests.add", args=[1, 2], **{field: value}
        )
        with pytest.raises(ValidationError) as caught:
            job.full_clean()
        assert words in " ".join(caught.value.message_dict[field]), (field, value)


def test_a_bad_row_saved_around_validation_keeps_its_runs_and_prunes_the_rest():
    bad = make_job()
    JobDefinition.objects.filter(pk=bad.pk).update(retention={"success": "never"})
    good = make_job()
    add(bad, RunStatus.SUCCESS, days_ago=100)
    add(good, RunStatus.SUCCESS, days_ago=100)
    prune()
    assert left(bad) == {"success": 1}
    assert left(good) == {}


def test_the_days_summary_is_written_before_its_runs_go_and_equals_them():
    job = make_job()
    day = (NOW - timedelta(days=45)).replace(hour=6, minute=0, second=0)
    start = day
    runs = []
    for i, (status, attempt, seconds, late) in enumerate(
        [
            ("success", 1, 2.0, 0.5),
            ("success", 2, 4.0, 1.5),
            ("success", 1, 6.0, 0.25),
            ("failed", 3, 1.0, 9.0),
            ("skipped", 1, None, None),
            ("missed", 1, None, None),
        ]
    ):
        slot = start + timedelta(minutes=i)
        runs.append(
            JobRun(
                job=job,
                scheduled_for=slot,
                due_at=slot,
                status=status,
                trigger=RunTrigger.SCHEDULE,
                task_id=f"t-{uuid.uuid4().hex}",
                attempt=attempt,
                duration=None if seconds is None else timedelta(seconds=seconds),
                started_at=None if late is None else slot + timedelta(seconds=late),
            )
        )
    JobRun.objects.bulk_create(runs)
    # The day's failed run is kept (90 days): the summary counts it all the same.
    pruned = prune()
    assert pruned.summaries == 1
    summary = RunSummary.objects.get(job=job)
    assert summary.day == day.date()
    assert (summary.success, summary.failed, summary.skipped, summary.missed) == (3, 1, 1, 1)
    assert (summary.cancelled, summary.uncertain, summary.unfinished) == (0, 0, 0)
    assert summary.retries == 1 + 2
    # Nearest rank: p50 of [1, 2, 4, 6] is the 2nd, p95 the 4th; lateness p95 the largest.
    assert (summary.duration_p50, summary.duration_p95) == (2.0, 6.0)
    assert summary.lateness_p95 == 9.0
    assert left(job) == {"failed": 1}
    # A later pass keeps the summary as it was.
    prune()
    assert RunSummary.objects.get(job=job).success == 3


def test_runs_recorded_into_a_summed_up_day_are_added_as_they_go():
    job = make_job()
    add(job, RunStatus.SUCCESS, days_ago=45, count=2)
    prune()
    assert RunSummary.objects.get(job=job).success == 2
    add(job, RunStatus.FAILED, days_ago=45, minutes=-5)  # a backfill of the same day
    prune(days=1)
    summary = RunSummary.objects.get(job=job)
    assert (summary.success, summary.failed) == (2, 1)


def test_summaries_past_their_year_go():
    job = make_job()
    old = RunSummary.objects.create(job=job, day=(NOW - timedelta(days=400)).date(), summed_at=NOW)
    kept = RunSummary.objects.create(job=job, day=(NOW - timedelta(days=20)).date(), summed_at=NOW)
    assert prune().summaries_dropped == 1
    assert list(RunSummary.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not RunSummary.objects.filter(pk=old.pk).exists()


def test_a_pass_takes_at_most_its_limit_oldest_first():
    job = make_job()
    runs = add(job, RunStatus.SUCCESS, days_ago=100, count=25)
    pruned = retention.prune(now=NOW, limit=10)
    assert (pruned.runs, pruned.full) == (10, True)
    kept = JobRun.objects.filter(job=job).order_by("scheduled_for").values_list("scheduled_for")
    assert [slot for (slot,) in kept] == [run.scheduled_for for run in runs[10:]]


def test_kept_runs_leading_the_ledger_do_not_stop_a_pass():
    """Runs kept by ``keep_last`` that are older than everything prunable (a monthly job's
    newest) fill whole windows of a pass's reading; the pass reads on past them."""
    monthly = [make_job(keep_last=2) for _ in range(4)]
    for job in monthly:
        add(job, RunStatus.SUCCESS, days_ago=400, count=2)
    plain = make_job()
    runs = add(plain, RunStatus.SUCCESS, days_ago=100, count=6)
    first = retention.prune(now=NOW, limit=4)
    assert (first.runs, first.full) == (4, True)
    second = retention.prune(now=NOW, limit=4)
    assert (second.runs, second.full) == (2, False)
    assert not JobRun.objects.filter(pk__in=[run.pk for run in runs]).exists()
    assert all(left(job) == {"success": 2} for job in monthly)


def test_a_pass_chooses_what_the_databases_own_keep_last_rule_chooses():
    """The pass compares each run with its job's keep-th newest slot itself; the same rule as
    one statement (a subquery per run) is the oracle: the same runs, oldest first, for every
    limit, slots shared by many jobs included."""
    import random

    rng = random.Random(49)
    jobs = [make_job(keep_last=rng.choice([None, 1, 2, 3])) for _ in range(6)]
    base = NOW - timedelta(days=200)
    rows = []
    for job in jobs:
        # A few slots shared by every job (ties across a window's edge) and some of its own.
        for slot in rng.sample(range(40), 12):
            rows.append(
                JobRun(
                    job=job,
                    scheduled_for=base + timedelta(hours=slot),
                    status=rng.choice([RunStatus.SUCCESS, RunStatus.SUCCESS, RunStatus.FAILED]),
                    trigger=RunTrigger.SCHEDULE,
                    task_id=f"t-{uuid.uuid4().hex}",
                )
            )
    JobRun.objects.bulk_create(rows)
    checked = 0
    for group in retention.groups(keep_last=2) + retention.groups():
        expected = list(group.runs(NOW).values_list("pk", "scheduled_for"))
        slot_of = dict(expected)
        checked += len(expected)
        for limit in (1, 2, 3, 5, 8, 13, len(expected), len(expected) + 5):
            chosen = [row[0] for row in group.choose(NOW, limit)]
            assert len(chosen) == len(set(chosen)) == min(limit, len(expected)), (group, limit)
            assert set(chosen) <= slot_of.keys(), (group, limit)
            rest = slot_of.keys() - set(chosen)
            if rest:  # the oldest: none left behind is older than one chosen
                assert max(slot_of[pk] for pk in chosen) <= min(slot_of[pk] for pk in rest)
    assert checked > 60  # both statuses, with and without the jobs' own keep_last


def test_a_deposed_leaders_pass_writes_nothing():
    job = make_job()
    add(job, RunStatus.SUCCESS, days_ago=100, count=3)
    old = Fence.claim("old-node", "old-token")
    Fence.claim("new-node", "new-token")  # a newer term
    with pytest.raises(FencedOut):
        retention.prune(now=NOW, limit=100, fence=old)
    assert left(job) == {"success": 3}
    assert not RunSummary.objects.exists()
    current = Fence.claim("new-node", "newer-token")
    assert retention.prune(now=NOW, limit=100, fence=current).runs == 3


def passed(pruner: Pruner, fence: Fence) -> retention.Pruned:
    pruned = pruner.run_pass(fence)
    assert pruned is not None
    return pruned


def test_the_leaders_pass_measures_what_is_left_and_the_health_check_reads_its_report(settings):
    from django_cluster_cron.ops.health import OK, WARN, check_pruning

    def health(found):
        return check_pruning(cast(Any, SimpleNamespace(leader_report={"prunable": found})))

    job = make_job()
    pruner = Pruner(term=cast(Any, None), clock=lambda: NOW)
    fence = Fence.claim("node-a", "token-a")
    assert passed(pruner, fence).runs == 0
    assert pruner.found == {}
    assert health(pruner.found).status == OK
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "PRUNE_RUNS": False}  # measure only
    [run] = add(job, RunStatus.SUCCESS, days_ago=61)
    assert retention.oldest_prunable(NOW) == retention.Oldest(run.scheduled_for, 30)
    pruner.run_pass(fence)
    assert left(job) == {"success": 1}
    assert pruner.found == {"age": (NOW - run.scheduled_for).total_seconds(), "days": 30}
    check = health(pruner.found)
    assert check.status == WARN
    assert "pruning is behind" in check.reason
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "PRUNE_RUNS": True}
    assert passed(pruner, fence).by_status == {"success": 1}
    assert pruner.found == {}
    assert health(None).status == OK


@pytest.mark.parametrize("lease_kind", ["database"])
def test_a_leader_prunes_on_its_own_thread_without_being_asked(make_scheduler, settings):
    from tests.support.inprocess import Clock

    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "PRUNE_INTERVAL": 0.05}
    job = make_job(enabled=False)  # paused: the leader records none of its slots
    add(job, RunStatus.SUCCESS, days_ago=100, count=3)
    add(job, RunStatus.FAILED, days_ago=60)  # within failed's 90 days
    scheduler = make_scheduler("node-a", Clock(NOW))

    def pruned():
        scheduler.step()
        return left(job) == {"failed": 1}

    wait_for(pruned, timeout=60, what="the leader's pass deleted the old successes")
    assert RunSummary.objects.get(job=job).success == 3
    scheduler.sweeps.pruner.join(30)


def test_prune_runs_dry_run_archive_and_summary(tmp_path):
    job = make_job()
    add(job, RunStatus.SUCCESS, days_ago=100, count=4, result="'ok'")
    add(job, RunStatus.QUEUED, days_ago=100)
    out = io.StringIO()
    call_command("prune_runs", "--dry-run", stdout=out)
    assert "4 runs would be deleted: 4 success." in out.getvalue()
    assert left(job) == {"success": 4, "queued": 1}
    archive = tmp_path / "runs.jsonl.gz"
    out = io.StringIO()
    call_command("prune_runs", "--archive", str(archive), "--batch-size", "3", stdout=out)
    assert "Deleted 4 runs (4 success)" in out.getvalue()
    assert "1 daily summaries written" in out.getvalue()
    with gzip.open(archive, "rt") as lines:
        rows = [json.loads(line) for line in lines]
    assert len(rows) == 4
    assert {row["status"] for row in rows} == {"success"}
    assert {row["result"] for row in rows} == {"'ok'"}
    assert {row["job_id"] for row in rows} == {job.pk}
    assert left(job) == {"queued": 1}


def test_prune_runs_exits_non_zero_on_a_failed_batch(monkeypatch):
    job = make_job()
    add(job, RunStatus.SUCCESS, days_ago=100, count=2)

    def broken(*args, **kwargs):
        from django.db import OperationalError

        raise OperationalError("the server closed the connection")

    monkeypatch.setattr(retention, "sum_up", broken)
    with pytest.raises(CommandError, match="A batch failed after 0 runs were deleted"):
        call_command("prune_runs", "--no-progress", stdout=io.StringIO())
    assert left(job) == {"success": 2}


def test_a_pass_counts_only_within_one_day_of_a_few_jobs_never_the_ledger():
    job = make_job(keep_last=2)
    add(job, RunStatus.SUCCESS, days_ago=100, count=5)
    with count_queries() as queries:
        assert retention.prune(now=NOW, limit=100).runs == 3
    counting = [text.upper() for text, _ in queries.queries if "COUNT(" in text.upper()]
    # PostgreSQL sums the day up in SQL; elsewhere the day's rows are read and nothing counts.
    assert bool(counting) == (connection.vendor == "postgresql")
    for text in counting:  # the day's summary: bounded by job and a day of slots
        assert "JOB_ID" in text, text
        assert 'SCHEDULED_FOR" >=' in text or "SCHEDULED_FOR >=" in text, text


def test_every_column_the_deletes_use_leads_an_index():
    """The foreign keys a run's delete cascades through, and the columns a pass filters on."""
    needed = {
        "django_cluster_cron_jobrun": [["status", "scheduled_for"], ["job_id", "status"]],
        "django_cluster_cron_jobpiece": [["run_id"]],
        "django_cluster_cron_runsummary": [["job_id", "day"], ["day"]],
    }
    with connection.cursor() as cursor:
        for table, prefixes in needed.items():
            indexes = [
                c["columns"]
                for c in connection.introspection.get_constraints(cursor, table).values()
                if c["index"] or c["unique"] or c["primary_key"]
            ]
            for prefix in prefixes:
                assert any(cols[: len(prefix)] == prefix for cols in indexes), (table, prefix)


def test_the_jobs_admin_page_shows_the_policy_in_force_and_refuses_a_bad_one(admin_client):
    from django.urls import reverse

    job = make_job(retention={"success": 7}, keep_last={"failed": 20})
    page = admin_client.get(
        reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    ).content.decode()
    assert (
        "success, skipped: 7 days; failed, uncertain: 90 days; missed, cancelled: 30 days" in page
    )
    assert "kept however old: the newest 20 failed" in page
    from tests.database.test_admin import VALID, field_errors, post

    assert VALID  # the admin form as a browser posts it
    response = post(admin_client, name="bad-retention", retention='{"pending": 3}')
    assert field_errors(response, "retention") == [
        "'pending' is not a final run status; give one of success, failed, skipped, missed, "
        "cancelled, uncertain (runs still waiting or running are never pruned)."
    ]


def test_the_api_sets_retention_refuses_bad_values_on_their_field_and_lists_summaries():
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "r@example.com", "x"))
    job = make_job()
    url = f"/cron/api/jobs/{job.pk}/"
    changed = client.patch(url, {"retention": {"failed": 365}, "keep_last": 5}, format="json")
    assert changed.status_code == 200, changed.json()
    assert (changed.json()["retention"], changed.json()["keep_last"]) == ({"failed": 365}, 5)
    refused = client.patch(url, {"keep_last": {"failed": -2}}, format="json")
    assert refused.status_code == 400
    assert "from 0 to 100,000; got -2" in str(refused.json()["keep_last"])
    add(job, RunStatus.SUCCESS, days_ago=45, count=2)
    prune(keep_last=0)
    body = client.get(f"{url}summaries/").json()
    [summary] = body["results"]
    assert summary["runs"] == summary["success"] == 2
    assert summary["day"] == (NOW - timedelta(days=45)).date().isoformat()


def test_a_job_declared_in_code_carries_its_retention_and_a_bad_one_is_left_out(settings):
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "JOBS": {
            "monthly": {
                "task": "tests.add",
                "schedule": "0 6 1 * *",
                "args": [1, 2],
                "retention": {"success": 400},
                "keep_last": 24,
            },
            "typo": {
                "task": "tests.add",
                "schedule": "0 6 1 * *",
                "args": [1, 2],
                "retention": {"succes": 400},
            },
        },
    }
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:  # one declaration left out: exit status 1
        call_command("sync_jobs", stdout=out, stderr=out)
    assert exited.value.code == 1
    job = JobDefinition.objects.get(name="monthly")
    assert (job.retention, job.keep_last) == ({"success": 400}, 24)
    assert job.retention_policy().days["success"] == 400
    assert not JobDefinition.objects.filter(name="typo").exists()
    assert "'succes' is not a final run status" in out.getvalue()


def test_the_databases_own_summary_equals_the_one_summed_up_here():
    """Two implementations of one summary (PostgreSQL's aggregates, and reading the rows)."""
    jobs = [make_job(), make_job()]
    day = (NOW - timedelta(days=3)).replace(hour=1, minute=0, second=0)
    runs = []
    for n in range(40):
        slot = day + timedelta(minutes=n)
        status = ["success", "failed", "running", "skipped", "success"][n % 5]
        runs.append(
            JobRun(
                job=jobs[n % 2],
                scheduled_for=slot,
                due_at=None if n % 3 else slot + timedelta(seconds=1),
                status=status,
                trigger=RunTrigger.SCHEDULE,
                task_id=f"t-{uuid.uuid4().hex}",
                attempt=1 + n % 4,
                duration=None if status == "skipped" else timedelta(milliseconds=37 * n + 5),
                started_at=None if status == "skipped" else slot + timedelta(milliseconds=n * n),
            )
        )
    JobRun.objects.bulk_create(runs)
    fields = [f.name for f in RunSummary._meta.concrete_fields if f.name not in ("id", "job")]

    def shown(summaries):
        return sorted((s.job_id, *[getattr(s, f) for f in fields]) for s in summaries)

    ids = [job.pk for job in jobs]
    here = summaries.summarise(ids, day.date(), now=NOW, in_python=True)
    assert len(here) == 2
    assert sum(s.unfinished for s in here) == 8
    assert shown(summaries.summarise(ids, day.date(), now=NOW)) == shown(here)


def test_a_run_no_longer_final_when_its_batch_is_deleted_stays(monkeypatch):
    job = make_job()
    runs = add(job, RunStatus.FAILED, days_ago=100, count=3)
    retried = JobRun.objects.get(scheduled_for=runs[1].scheduled_for)
    real = summaries.sum_up

    def retried_meanwhile(batch, *, now, step):
        # An operator's retry lands between the pass's choice and its delete.
        JobRun.objects.filter(pk=retried.pk).update(status=RunStatus.PENDING)
        return real(batch, now=now, step=step)

    monkeypatch.setattr(retention, "sum_up", retried_meanwhile)
    assert retention.prune(now=NOW, limit=100).by_status == {"failed": 2}
    assert left(job) == {"pending": 1}


def test_the_leaders_pass_writes_in_short_fenced_transactions_not_one(monkeypatch):
    # A fenced transaction holds the leader row's lock until it commits, and every fenced write
    # of the tick waits for it: a pass is many short ones, each a chunk of ids, never nested.
    monkeypatch.setattr(retention, "CHUNK", 2)
    job = make_job()
    add(job, RunStatus.SUCCESS, days_ago=100, count=5)
    add(job, RunStatus.SKIPPED, days_ago=100, minutes=30, count=3)
    fence = Fence.claim("node-a", "token-a")
    real = Fence.transaction
    entered = []

    def counted(self, now):
        entered.append(connection.in_atomic_block)
        return real(self, now)

    monkeypatch.setattr(Fence, "transaction", counted)
    pruned = retention.prune(now=NOW, limit=100, fence=fence)
    assert pruned.by_status == {"success": 5, "skipped": 3}
    # Summaries (a step), 3 chunks of success, 2 of skipped, the old summaries (a step).
    assert len(entered) == 1 + 3 + 2 + 1
    assert not any(entered), "a step ran inside another transaction"


def test_the_pruning_waits_while_the_tick_records_a_slots_runs(monkeypatch):
    import threading

    from django_cluster_cron.scheduler import pruning

    monkeypatch.setattr(pruning, "YIELD_MOST", 120.0)  # not given up on a loaded machine
    job = make_job()
    add(job, RunStatus.SUCCESS, days_ago=100, count=3)
    fence = Fence.claim("node-a", "token-a")
    term = SimpleNamespace(quiet=threading.Event(), fence=fence)  # the tick is recording
    pruner = Pruner(term=cast(Any, term), clock=lambda: NOW)
    done = []
    thread = threading.Thread(target=lambda: done.append(pruner.run_pass(fence)))
    thread.start()
    try:
        thread.join(0.5)
        assert thread.is_alive(), "the pass wrote while the tick was recording"
        assert left(job) == {"success": 3}
    finally:
        term.quiet.set()  # the tick is done
        thread.join(30)
    assert done[0] is not None
    assert left(job) == {}
