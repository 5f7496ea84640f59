"""The worker's compiled claim and final record (worker/statements.py) against the ORM: the same
rows written, the same instances read, the same refusals."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.db.models import Model

from django_cluster_cron.ledger.statements import claim_run, finish_run
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from tests.support.jobs import make_job, make_run

pytestmark = pytest.mark.django_db


def fields_of(instance: Model) -> dict[str, object]:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


def test_the_claim_returns_what_the_orm_reads_run_and_job_field_for_field():
    job = make_job(
        task="tests.echo",  # takes any arguments
        args=["a", 1, {"nested": [1.5, None, True]}],
        kwargs={"label": "ünïcode", "n": 2},
        jitter=30,
        max_runs=5,
        start_at=datetime(2030, 1, 1, tzinfo=timezone.utc),
        catchup_window=timedelta(hours=3),
        expires=600,
    )
    run = make_run(job)
    claimed = claim_run(run.pk, run.task_id, 1, "host:123")
    assert claimed is not None
    stored = JobRun.objects.select_related("job").get(pk=run.pk)
    assert fields_of(claimed) == fields_of(stored)
    assert fields_of(claimed.job) == fields_of(stored.job)
    assert set(vars(claimed)) == set(vars(stored))  # nothing more, nothing less
    assert set(vars(claimed.job)) == set(vars(stored.job))
    assert claimed.job._loaded == stored.job._loaded  # what a later save compares with
    assert (claimed._state.adding, claimed._state.db) == (False, stored._state.db)
    assert (claimed.job._state.adding, claimed.job._state.db) == (False, stored.job._state.db)
    assert claimed.job.args == ["a", 1, {"nested": [1.5, None, True]}]
    assert isinstance(claimed.job, JobDefinition)
    assert (claimed.status, claimed.worker, claimed.attempt) == (RunStatus.RUNNING, "host:123", 1)
    assert claimed.started_at is not None
    assert claimed.started_at.tzinfo is not None
    assert claimed.heartbeat_at == claimed.started_at


def test_a_pre_init_or_post_init_receiver_sees_the_claimed_run_and_job_built():
    from django.db.models.signals import post_init, pre_init

    seen = []

    def receiver(sender, **info):
        seen.append(sender.__name__)

    for signal in (pre_init, post_init):
        for model in (JobRun, JobDefinition):
            signal.connect(receiver, sender=model)
    try:
        run = make_run(make_job())
        seen.clear()
        claimed = claim_run(run.pk, run.task_id, 1, "host:123")
    finally:
        for signal in (pre_init, post_init):
            for model in (JobRun, JobDefinition):
                signal.disconnect(receiver, sender=model)
    assert claimed is not None
    assert sorted(seen) == ["JobDefinition", "JobDefinition", "JobRun", "JobRun"]


@pytest.mark.parametrize(
    ("status", "task_id", "attempt"),
    [
        (RunStatus.RUNNING, None, 1),  # taken by another delivery
        (RunStatus.SUCCESS, None, 1),
        (RunStatus.CANCELLED, None, 1),
        (RunStatus.QUEUED, "cron-0-forged", 1),  # not this run's message
        (RunStatus.QUEUED, None, 2),  # an attempt that is not the run's
    ],
)
def test_the_claim_is_refused_exactly_where_the_orm_would_refuse_it(status, task_id, attempt):
    run = make_run(make_job(), status=status)
    before = fields_of(JobRun.objects.get(pk=run.pk))
    assert claim_run(run.pk, task_id or run.task_id, attempt, "host:1") is None
    assert fields_of(JobRun.objects.get(pk=run.pk)) == before


def test_a_second_claim_of_the_same_delivery_loses():
    run = make_run(make_job())
    assert claim_run(run.pk, run.task_id, 1, "w1:1") is not None
    assert claim_run(run.pk, run.task_id, 1, "w2:2") is None
    assert JobRun.objects.get(pk=run.pk).worker == "w1:1"


def test_the_final_record_writes_its_fields_only_while_running_at_that_attempt():
    run = make_run(make_job())
    claimed = claim_run(run.pk, run.task_id, 1, "w:1")
    assert claimed is not None
    retry_at = datetime(2031, 2, 3, 4, 5, 6, 789000, tzinfo=timezone.utc)
    values = {
        "status": RunStatus.RETRYING,
        "attempt": 2,
        "retry_at": retry_at,
        "republish_at": retry_at,
        "error": "ValueError: ü",
        "traceback": "Traceback …",
        "duration": timedelta(seconds=1.25),
    }
    assert finish_run(run.pk, 2, values) == 0  # not running at attempt 2
    assert finish_run(run.pk, 1, values) == 1
    stored = JobRun.objects.get(pk=run.pk)
    assert (stored.status, stored.attempt, stored.retry_at, stored.republish_at) == (
        RunStatus.RETRYING,
        2,
        retry_at,
        retry_at,
    )
    assert (stored.error, stored.traceback, stored.duration) == (
        "ValueError: ü",
        "Traceback …",
        timedelta(seconds=1.25),
    )
    assert stored.finished_at is not None
    assert stored.finished_at >= claimed.started_at
    assert finish_run(run.pk, 1, {"status": RunStatus.SUCCESS}) == 0  # no longer running


@pytest.mark.django_db(transaction=True)
def test_on_a_workers_own_connection_the_statements_outlive_djangos_and_reconnect():
    """What a worker process does (django_cluster_cron.tasks turns it on): the claim and the
    record on the thread's own connection, which closing Django's (Celery's fixup does, around
    every task) leaves open; after an error the statements reconnect."""
    from django.db import connection

    from django_cluster_cron.dbconn import close_own_connection, own_wrapper
    from django_cluster_cron.ledger.statements import reset_connection, use_own_connection

    first, second = make_run(make_job()), make_run(make_job())
    use_own_connection()
    try:
        assert claim_run(first.pk, first.task_id, 1, "w:1") is not None
        own = own_wrapper(connection.alias)
        assert own is not None
        assert own is not connection
        connection.close()  # what Celery's Django fixup does after each task
        assert finish_run(first.pk, 1, {"status": RunStatus.SUCCESS}) == 1
        assert own_wrapper(connection.alias) is own
        assert own.connection is not None  # still the same open connection
        reset_connection()  # after a connection error
        assert own_wrapper(connection.alias) is None
        assert claim_run(second.pk, second.task_id, 1, "w:1") is not None  # reconnected
    finally:
        use_own_connection(False)
        close_own_connection()
    assert JobRun.objects.get(pk=first.pk).status == RunStatus.SUCCESS
    assert JobRun.objects.get(pk=second.pk).status == RunStatus.RUNNING


def test_how_long_until_due_says_now_for_a_due_run_and_nothing_for_one_taken():
    """A delivery whose claim found its run a moment early asks how long to wait. If the run
    became due in between, the answer is 0 (claim again), not "not yours" — which dropped the
    message as a duplicate and left the run queued (seen on a loaded CI run: a message 2 ms
    early)."""
    from django.db.models import F

    from django_cluster_cron.dbtime import database_now
    from django_cluster_cron.ledger.statements import seconds_until_due

    run = make_run(make_job())
    now = database_now()
    JobRun.objects.filter(pk=run.pk).update(due_at=now - timedelta(milliseconds=1))
    assert seconds_until_due(run.pk, run.task_id, 1) == 0.0
    JobRun.objects.filter(pk=run.pk).update(due_at=None)
    assert seconds_until_due(run.pk, run.task_id, 1) == 0.0
    JobRun.objects.filter(pk=run.pk).update(due_at=now + timedelta(seconds=30))
    assert 25 < (seconds_until_due(run.pk, run.task_id, 1) or 0) <= 30
    assert seconds_until_due(run.pk, run.task_id, 2) is None  # not this attempt's message
    JobRun.objects.filter(pk=run.pk).update(due_at=F("scheduled_for"))
    assert claim_run(run.pk, run.task_id, 1, "w:1") is not None
    assert seconds_until_due(run.pk, run.task_id, 1) is None  # taken


@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_workers_own_connection_prepares_both_statements_once():
    """What makes them cheap: PostgreSQL parses and plans each once per connection. Django's
    default cursor binds parameters on the client, where psycopg prepares nothing; this fails if
    the statements drift back to it."""
    from django.db import connection

    from django_cluster_cron.dbconn import close_own_connection, own_wrapper
    from django_cluster_cron.ledger.statements import use_own_connection

    if connection.vendor != "postgresql":
        pytest.skip("prepared statements: PostgreSQL")
    runs = [make_run(make_job()) for _ in range(3)]
    use_own_connection()
    try:
        for run in runs:
            assert claim_run(run.pk, run.task_id, 1, "w:1") is not None
            assert finish_run(run.pk, 1, {"status": RunStatus.SUCCESS}) == 1
        own = own_wrapper(connection.alias)
        assert own is not None
        with own.cursor() as cursor:
            cursor.execute(
                "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
                [f"UPDATE {connection.ops.quote_name(JobRun._meta.db_table)}%"],
            )
            prepared = [row[0] for row in cursor.fetchall()]
    finally:
        use_own_connection(False)
        close_own_connection()
    assert len(prepared) == 2, prepared  # the claim and the record, each prepared once
    assert any(" RETURNING " in statement for statement in prepared)  # the claim
    assert {run.status for run in JobRun.objects.filter(pk__in=[r.pk for r in runs])} == {
        RunStatus.SUCCESS
    }


@pytest.mark.django_db(transaction=True)
def test_on_a_workers_own_connection_the_claim_reads_what_the_orm_reads_time_zones_too():
    """The own connection's cursors read timestamps with psycopg's compiled loader where it
    gives what Django's gives: the same values and the same tzinfo object, field for field."""
    from django.db import connection

    from django_cluster_cron.dbconn import close_own_connection
    from django_cluster_cron.ledger import cursors, statements

    job = make_job(
        start_at=datetime(2030, 1, 1, 12, 30, 15, 123456, tzinfo=timezone.utc),
        catchup_window=timedelta(hours=3),
    )
    run = make_run(job)
    statements.use_own_connection()
    try:
        claimed = claim_run(run.pk, run.task_id, 1, "w:1")
        kept = list(cursors._kept.cursors.values())
    finally:
        statements.use_own_connection(False)
        close_own_connection()
    assert claimed is not None
    stored = JobRun.objects.select_related("job").get(pk=run.pk)
    assert fields_of(claimed) == fields_of(stored)
    assert fields_of(claimed.job) == fields_of(stored.job)
    pairs = [(claimed, stored), (claimed.job, stored.job)]
    zones = {
        (type(a).__name__, f.attname): (getattr(a, f.attname).tzinfo, getattr(b, f.attname).tzinfo)
        for a, b in pairs
        for f in a._meta.concrete_fields
        if isinstance(getattr(a, f.attname), datetime)
    }
    assert ("JobRun", "started_at") in zones
    assert ("JobDefinition", "start_at") in zones
    assert all(mine is theirs for mine, theirs in zones.values()), zones
    if connection.vendor == "postgresql":
        from django.db.backends.postgresql.psycopg_any import BaseTzLoader
        from psycopg.pq import Format

        assert len(kept) == 1  # the claim's cursor, kept for the connection
        loader = kept[0].cursor.adapters.get_loader(1184, Format.TEXT)
        assert not issubclass(loader, BaseTzLoader), loader  # not Django's Python loader
