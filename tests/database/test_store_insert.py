"""The scheduler's fast run insert writes exactly what ``bulk_create(ignore_conflicts)`` writes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import models

from django_cluster_cron.ledger.fastinsert import (
    FastInsertError,
    insert_columns,
    insert_ignoring_conflicts,
)
from django_cluster_cron.ledger.rows import ROW_FIELDS, RunRow, new_run, run_row
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 1, 12, 0, 7, 123456, tzinfo=timezone.utc)
SLOT = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both paths read the clock for created_at/updated_at: make it one instant."""
    monkeypatch.setattr("django.utils.timezone.now", lambda: NOW)


def job(name: str) -> JobDefinition:
    created: JobDefinition = JobDefinition.objects.create(
        name=name, cron="* * * * *", task="tests.noop"
    )
    return created


def runs(jobs: list[JobDefinition]) -> list[RunRow]:
    """A mix of statuses, triggers, reasons and slots, like one scheduler batch."""
    rows = []
    for n, j in enumerate(jobs):
        rows.append(run_row(j, SLOT, RunTrigger.SCHEDULE, RunStatus.PENDING))
        rows.append(
            run_row(j, SLOT - timedelta(minutes=1), RunTrigger.CATCHUP, RunStatus.MISSED, "r" * 300)
        )
        rows.append(
            run_row(
                j, SLOT - timedelta(minutes=2 + n), RunTrigger.SCHEDULE, RunStatus.SKIPPED, "busy"
            )
        )
    return rows


def table() -> list[dict[str, Any]]:
    """Every column of every run, keyed by (job, slot) rather than the generated id."""
    names = [f.attname for f in insert_columns(JobRun)]
    return sorted(JobRun.objects.values(*names), key=lambda r: (r["job_id"], r["scheduled_for"]))


def test_rows_equal_bulk_create_column_for_column(frozen: None) -> None:
    jobs = [job(f"j{n}") for n in range(3)]
    rows = runs(jobs)
    JobRun.objects.bulk_create(
        [
            new_run(
                j,
                r.scheduled_for,
                r.trigger,
                node="node-1",
                epoch=7,
                status=r.status,
                reason=r.reason,
            )
            for j, r in zip([j for j in jobs for _ in range(3)], rows, strict=True)
        ],
        ignore_conflicts=True,
    )
    expected = table()
    JobRun.objects.all().delete()

    insert_ignoring_conflicts(JobRun, ROW_FIELDS, rows, {"dispatched_by": "node-1", "epoch": 7})

    assert table() == expected
    assert len(expected) == 9
    assert expected[0]["created_at"] == NOW  # the timestamps really were written


def test_more_rows_than_one_statement_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches respect the backend's limit: force a tiny one and still get every row."""
    from django.db import connection

    monkeypatch.setattr(connection.ops, "bulk_batch_size", lambda fields, objs: 2)
    j = job("many")
    rows = [
        run_row(j, SLOT - timedelta(minutes=m), RunTrigger.SCHEDULE, RunStatus.PENDING)
        for m in range(7)
    ]
    insert_ignoring_conflicts(JobRun, ROW_FIELDS, rows, {"dispatched_by": "n", "epoch": 1})
    assert JobRun.objects.filter(job=j).count() == 7


def test_existing_row_is_left_untouched() -> None:
    j = job("conflict")
    existing = new_run(j, SLOT, RunTrigger.SCHEDULE, node="old", epoch=1)
    existing.status = RunStatus.RUNNING
    existing.worker = "w@1"
    existing.save()
    before = JobRun.objects.values().get(pk=existing.pk)

    rows = [
        run_row(j, SLOT, RunTrigger.CATCHUP, RunStatus.PENDING),  # same (job, slot): conflicts
        run_row(j, SLOT + timedelta(minutes=1), RunTrigger.SCHEDULE, RunStatus.PENDING),
    ]
    insert_ignoring_conflicts(JobRun, ROW_FIELDS, rows, {"dispatched_by": "new", "epoch": 2})

    assert JobRun.objects.values().get(pk=existing.pk) == before
    fresh = JobRun.objects.get(job=j, scheduled_for=SLOT + timedelta(minutes=1))
    assert (fresh.dispatched_by, fresh.epoch, fresh.status) == ("new", 2, RunStatus.PENDING)


def test_column_list_is_every_concrete_field_but_the_id() -> None:
    """A field added to JobRun is written without anyone listing it here or in the store."""
    concrete = {f.attname for f in JobRun._meta.concrete_fields} - {"id"}
    assert {f.attname for f in insert_columns(JobRun)} == concrete
    assert set(ROW_FIELDS) < concrete


def test_new_field_with_default_gets_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field the store does not know about is prepared from the model's default."""
    j = job("extra")
    extra = models.CharField(max_length=8, default="dflt")
    extra.set_attributes_from_name("extra")
    extra.model = JobRun
    # As if the field had been added to the model (the table itself is not altered: the
    # statement is captured, not run).
    monkeypatch.setattr(JobRun._meta, "concrete_fields", (*JobRun._meta.concrete_fields, extra))
    assert extra in insert_columns(JobRun)
    executed: list[tuple[str, list[Any]]] = []

    class Cursor:
        def __enter__(self) -> Cursor:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def execute(self, sql: str, params: list[Any]) -> None:
            executed.append((sql, params))

    from django.db import connection

    monkeypatch.setattr(connection, "cursor", Cursor)
    insert_ignoring_conflicts(
        JobRun, ROW_FIELDS, [run_row(j, SLOT, RunTrigger.SCHEDULE, RunStatus.PENDING)], {}
    )
    ((sql, params),) = executed
    assert connection.ops.quote_name("extra") in sql
    assert "dflt" in params


@pytest.mark.parametrize(
    ("varying", "rows", "constants", "message"),
    [
        (("job_id", "nope"), [(1, 2)], {}, "'nope' is not an inserted column"),
        (("job_id",), [(1,)], {"job_id": 1}, "both varying and constant"),
        (("job_id", "task_id"), [(1,)], {}, "row 0 has 1 values for 2 columns"),
        (("job_id",), [(1,)], {"id": 5}, "'id' is not an inserted column"),
    ],
)
def test_bad_input_says_what_is_wrong(
    varying: tuple[str, ...], rows: list[tuple[Any, ...]], constants: dict[str, Any], message: str
) -> None:
    with pytest.raises(FastInsertError, match=message):
        insert_ignoring_conflicts(JobRun, varying, rows, constants)
    assert not JobRun.objects.exists()
