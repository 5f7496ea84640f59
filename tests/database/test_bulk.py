"""The bulk statements' expressions on each database: ids as one list parameter, moments read as
text and back, and PostgreSQL's JIT off only inside ``uncompiled``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection
from django.db.models import DateTimeField, F, Value

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from django_cluster_cron.models.bulk import (
    AnyOf,
    MomentText,
    RowBefore,
    moment_reader,
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
