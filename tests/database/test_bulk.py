"""The bulk statements' expressions on each database: ids as one list parameter, moments read as
text and back, and PostgreSQL's JIT off only inside ``uncompiled``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection, transaction
from django.db.models import DateTimeField, F, Value

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from django_cluster_cron.models.bulk import (
    AnyOf,
    MomentText,
    RowBefore,
    moment_reader,
    prefix_range,
    through_index,
    uncompiled,
)
from tests.support.jobs import make_job, make_run
from tests.support.querycount import count_queries

pytestmark = pytest.mark.django_db(transaction=True)


def test_any_of_picks_the_rows_listed_and_none_for_an_empty_list():
    jobs = [make_job() for _ in range(5)]
    picked = [jobs[0].pk, jobs[3].pk, 10**9]
    found = JobDefinition.objects.filter(AnyOf("id", picked)).values_list("pk", flat=True)
    assert sorted(found) == sorted([jobs[0].pk, jobs[3].pk])
    assert not JobDefinition.objects.filter(AnyOf("id", [])).exists()
    # Beside other conditions, and in a delete as pruning writes it.
    runs = [make_run(jobs[1], status=RunStatus.SUCCESS) for _ in range(3)]
    doomed = JobRun.objects.filter(AnyOf("id", [runs[0].pk, runs[2].pk]), status="success")
    assert doomed._raw_delete(doomed.db) == 2
    assert list(JobRun.objects.values_list("pk", flat=True)) == [runs[1].pk]
    # Strings, and whole numbers past 32 bits.
    named = JobRun.objects.filter(AnyOf("task_id", [runs[1].task_id, "nope"]))
    assert list(named.values_list("pk", flat=True)) == [runs[1].pk]
    assert not JobRun.objects.filter(AnyOf("id", [2**40, 2**62])).exists()


def test_any_of_is_one_parameter_on_postgresql_and_in_elsewhere():
    ids = list(range(1, 2001))
    with count_queries() as log:
        list(JobDefinition.objects.filter(AnyOf("id", ids)))
    (sql,) = [sql for sql, _ in log.queries if sql.startswith("SELECT")]
    if connection.vendor == "postgresql":
        assert "= ANY(" in sql
        assert " IN (" not in sql
    else:
        assert " IN (" in sql


def test_row_before_is_the_rows_of_a_status_before_a_moment():
    job = make_job()
    runs = [make_run(job, status=status) for status in ("success", "failed", "success")]
    slots = sorted(run.scheduled_for for run in runs)
    bound = slots[1] + timedelta(microseconds=1)  # after the two oldest
    found = JobRun.objects.filter(
        RowBefore(F("status"), F("scheduled_for"), Value("success"), Value(bound, DateTimeField())),
        status="success",
    )
    expected = [r.pk for r in runs if r.status == "success" and r.scheduled_for < bound]
    assert sorted(found.values_list("pk", flat=True)) == sorted(expected)
    assert len(expected) == 1


def test_prefix_range_is_the_rows_of_one_value_in_a_slot_range_oldest_first():
    job = make_job()
    # Statuses sorting on either side of "success" and the rows of each at every slot.
    statuses = ["failed", "skipped", "success", "terminating", "uncertain", "success"]
    runs = [make_run(job, status=status) for status in statuses * 3]
    slots = sorted(run.scheduled_for for run in runs)
    since, before = slots[3], slots[-4]
    field = DateTimeField()
    for lower in (None, since):
        found = JobRun.objects.filter(
            prefix_range(
                "status",
                "success",
                "scheduled_for",
                Value(before, field),
                None if lower is None else Value(lower, field),
            )
        ).order_by("status", "scheduled_for")
        expected = sorted(
            (r.scheduled_for, r.pk)
            for r in runs
            if r.status == "success"
            and r.scheduled_for < before
            and (lower is None or r.scheduled_for >= lower)
        )
        assert list(found.values_list("pk", flat=True)) == [pk for _, pk in expected]
        assert len(expected) >= 3 if lower is None else len(expected) >= 2
        if connection.vendor == "postgresql":
            # Read as one range of the (status, slot) index in its order (the slot index would
            # need a sort): the plan when neither a whole-table read nor a bitmap is allowed.
            sql, params = found.query.sql_with_params()
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute("SET LOCAL enable_bitmapscan = off")
                cursor.execute("EXPLAIN " + sql, params)
                plan = "\n".join(line for (line,) in cursor.fetchall())
            assert "cluster_cron_run_status" in plan, plan
            assert "Sort" not in plan, plan


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 11, 30, 15, 4, 5, tzinfo=timezone.utc),
        datetime(2026, 3, 29, 1, 59, 59, 123456, tzinfo=timezone.utc),
        datetime(1999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5))),
    ],
)
def test_a_moment_read_as_text_is_the_moment_django_reads(moment):
    job = make_job()
    JobDefinition.objects.filter(pk=job.pk).update(next_run_at=moment, last_scheduled_at=None)
    read = moment_reader()
    text, empty = (
        JobDefinition.objects.filter(pk=job.pk)
        .annotate(next_text=MomentText("next_run_at"), last_text=MomentText("last_scheduled_at"))
        .values_list("next_text", "last_text")
        .get()
    )
    assert isinstance(text, str)
    found = read(text)
    assert found == moment == JobDefinition.objects.get(pk=job.pk).next_run_at
    assert found is not None
    assert found.utcoffset() == timedelta(0)
    assert empty is None
    assert read(empty) is None


def test_uncompiled_turns_jit_off_only_inside_on_postgresql():
    if connection.vendor != "postgresql":
        with count_queries() as log, uncompiled():
            JobDefinition.objects.count()
        assert not [sql for sql, _ in log.queries if "jit" in sql]  # nothing to turn off
        return

    def jit() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW jit")
            return str(cursor.fetchone()[0])

    before = jit()
    with uncompiled():
        assert jit() == "off"
    assert jit() == before


def test_a_moment_written_with_its_offset_is_read_with_it():
    """Rows written around Django (a raw INSERT on SQLite) may carry their offset."""
    read = moment_reader()
    assert read("2026-11-30 19:08:17+00:00") == datetime(
        2026, 11, 30, 19, 8, 17, tzinfo=timezone.utc
    )
    assert read("2026-11-30 20:08:17.500000+01:00") == datetime(
        2026, 11, 30, 19, 8, 17, 500000, tzinfo=timezone.utc
    )
    assert read(None) is None


def test_through_index_names_the_index_on_mysql_after_table_and_alias_and_nowhere_else():
    from django.db.models import OuterRef, Subquery
    from django.test.utils import CaptureQueriesContext

    job = make_job()
    run = make_run(job, status=RunStatus.SUCCESS)
    newest = JobRun.objects.filter(job=OuterRef("pk")).order_by("-scheduled_for")
    with (
        CaptureQueriesContext(connection) as sent,
        through_index(JobRun, "cluster_cron_run_one_per_slot"),
    ):
        # The table bare, with an alias in a subquery, and joined.
        assert list(JobRun.objects.filter(job=job).values_list("pk", flat=True)) == [run.pk]
        last = JobDefinition.objects.annotate(last=Subquery(newest.values("pk")[:1]))
        assert list(last.values_list("last", flat=True)) == [run.pk]
        assert JobRun.objects.filter(job__name=job.name).count() == 1
    hint = "FORCE INDEX (`cluster_cron_run_one_per_slot`)"
    named = [q["sql"].count(hint) for q in sent.captured_queries]
    assert named == ([1, 1, 1] if connection.vendor == "mysql" else [0, 0, 0])
    with CaptureQueriesContext(connection) as after:
        JobRun.objects.filter(job=job).exists()
    assert hint not in after.captured_queries[0]["sql"]
