"""The ledger's pages read an index in the order they show, on every database: the statement
each list runs (the admin's run list and its filters, the API's, one job's) is explained by the
database itself, and none sorts the ledger's rows. On MySQL/MariaDB a descending slot index and
a join from the jobs' side made the whole run list a sort of every run (0.5 s at 200,000 runs):
this is the test that would have said so."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from tests.support.statistics import analyze

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = 4000
TABLE = JobRun._meta.db_table


@contextmanager
def statements() -> Iterator[list[tuple[str, Any]]]:
    found: list[tuple[str, Any]] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        found.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield found


def ledger(jobs: int = 20) -> list[JobDefinition]:
    made = []
    for i in range(jobs):
        job = JobDefinition(
            name=f"plan-{i}-{uuid.uuid4().hex[:6]}", cron="* * * * *", task="tests.add", args=[1, 2]
        )
        job.full_clean()
        job.save()
        made.append(job)
    now = timezone.now().replace(microsecond=0)
    statuses = [RunStatus.SUCCESS] * 8 + [RunStatus.FAILED, RunStatus.SKIPPED]
    JobRun.objects.bulk_create(
        (
            JobRun(
                job=made[i % jobs],
                scheduled_for=now - timedelta(minutes=i // jobs, seconds=i % jobs),
                task_id=f"t-{uuid.uuid4().hex}",
                status=statuses[i % len(statuses)],
                trigger=RunTrigger.SCHEDULE,
            )
            for i in range(RUNS)
        ),
        batch_size=1000,
    )
    analyze(TABLE)
    return made


def page_statement(client: Any, url: str) -> tuple[str, Any]:
    """The statement that reads the page's runs: the ledger's, ordered, limited."""
    with statements() as found:
        assert client.get(url).status_code == 200
    listing = [
        (sql, params)
        for sql, params in found
        if f"FROM {connection.ops.quote_name(TABLE)}" in sql
        and "ORDER BY" in sql
        and "LIMIT" in sql
        and not sql.lstrip().upper().startswith("SELECT COUNT")
    ]
    assert listing, f"{url}: no statement read the page's runs"
    return listing[-1]


def sorts_the_ledger(sql: str, params: Any) -> str:
    """What in the database's plan of ``sql`` sorts rows of the ledger ("" for nothing)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # A small table is sorted cheaply: priced out, a sort stays only where no index
            # can give the order.
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            sorts = [
                line
                for line in plan.splitlines()
                if "Sort" in line and "Incremental Sort" not in line and "Sort Key" not in line
            ]
            return plan if sorts else ""
        if connection.vendor == "mysql":
            # A small table is sorted cheaply: asked for one row, the optimizer reads an index
            # in order wherever one gives the order, and sorts only where none does.
            one = re.sub(r"LIMIT \d+(?: OFFSET \d+)?\s*$", "LIMIT 1", sql)
            cursor.execute("EXPLAIN " + one, params)
            columns = [c[0] for c in cursor.description]
            rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
            bad = [
                r
                for r in rows
                if "filesort" in (r.get("Extra") or "") or "temporary" in (r.get("Extra") or "")
            ]
            return str(rows) if bad else ""
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
        return plan if "TEMP B-TREE FOR ORDER BY" in plan else ""


def test_no_ledger_page_sorts_the_ledger(admin_client):
    jobs = ledger()
    one = jobs[3].pk
    runs = reverse("admin:django_cluster_cron_jobrun_changelist")
    pages = {
        "admin: runs": runs,
        "admin: runs, one job": f"{runs}?job__id__exact={one}",
        "admin: runs, failed": f"{runs}?status__exact=failed",
        "admin: runs, trigger": f"{runs}?trigger__exact=schedule",
        "admin: runs, page 3": f"{runs}?p=3",
        "api: runs": "/cron/api/runs/",
        "api: runs, one job": f"/cron/api/runs/?job={one}",
        "api: runs, failed": "/cron/api/runs/?status=failed",
    }
    found = {}
    for name, url in pages.items():
        sql, params = page_statement(admin_client, url)
        found[name] = sorts_the_ledger(sql, params)
    assert not any(found.values()), {name: plan for name, plan in found.items() if plan}


def test_the_jobs_list_reads_each_jobs_newest_runs_through_its_own_index(admin_client):
    """The run strips: one "newest 20 of this job" read a job. MariaDB read some jobs' through
    the slot index, stepping over every other job's runs (30 ms a job at 50 M runs): on
    MySQL/MariaDB each is read through the job's (job, slot) index by name."""
    from django.test.utils import CaptureQueriesContext

    if connection.vendor == "sqlite":
        pytest.skip(
            "SQLite reads the strips with a window over the page's jobs (no LIMIT in a UNION)"
        )
    ledger()
    page = reverse("admin:django_cluster_cron_jobdefinition_changelist")
    with statements() as found, CaptureQueriesContext(connection) as sent:
        assert admin_client.get(page).status_code == 200
    (sql, params), *others = [(s, p) for s, p in found if "UNION ALL" in s]
    assert not others
    assert sql.count("UNION ALL") == 19  # the page's 20 jobs, one read each
    if connection.vendor == "mysql":
        # As the server got it: each read with its index named.
        (hinted,) = [q["sql"] for q in sent.captured_queries if "UNION ALL" in q["sql"]]
        assert hinted.count("FORCE INDEX (`cluster_cron_run_one_per_slot`)") == 20, hinted
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + hinted)
            columns = [c[0] for c in cursor.description]
            rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        reads = [row for row in rows if row["table"] == TABLE]
        assert len(reads) == 20, rows
        assert {row["key"] for row in reads} == {"cluster_cron_run_one_per_slot"}, rows
        assert not any("filesort" in (row["Extra"] or "") for row in reads), rows
    else:
        assert not sorts_the_ledger(sql, params)


def test_the_idle_ticks_statement_reads_the_due_index_not_every_job():
    """The earliest next run comes from the first entries of the due index: as MIN() under a
    condition, MariaDB read every job (42 ms a tick at 100,000 jobs)."""
    from django.test.utils import CaptureQueriesContext

    from django_cluster_cron.scheduler.recording import _idle_query

    now = timezone.now()
    JobDefinition.objects.bulk_create(
        JobDefinition(
            name=f"idle-{i}",
            cron="* * * * *",
            task="tests.add",
            enabled=i % 7 != 0,
            next_run_at=now + timedelta(days=1, seconds=i),
        )
        for i in range(400)
    )
    analyze(JobDefinition._meta.db_table)
    with CaptureQueriesContext(connection) as sent:
        list(_idle_query())
    (sql,) = [q["sql"] for q in sent.captured_queries]
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + sql)
            columns = [c[0] for c in cursor.description]
            rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        (jobs,) = [row for row in rows if row["table"] in ("U0", JobDefinition._meta.db_table)]
        assert jobs["key"] == "cluster_cron_job_due", rows
        assert jobs["type"] != "ALL", rows
