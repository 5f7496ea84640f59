"""The worker side in process: claims, the run lifecycle, retries, execution-side overlap.

The tests run the real task through Celery's ``apply`` (no broker); tests/cluster/
test_worker_processes.py runs real Celery worker processes. The task bodies write to the witness
table ``testapp.Execution``, independent of the run ledger.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.utils import timezone

from django_cluster_cron import signals
from django_cluster_cron.dbtime import database_now
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from django_cluster_cron.tasks import execute_run
from django_cluster_cron.worker.claim import duplicate_deliveries
from tests.support.cluster import cut_other_connections
from tests.support.jobs import FORM, apply, make_job, make_run
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True, params=["task", "execute_run"])
def message_form(request):
    """Every test delivers the run's message in both forms: the job's own task (what the leader
    sends) and ``execute_run`` (what it sends while older workers may be up)."""
    FORM["current"] = request.param
    yield request.param
    FORM["current"] = "task"


@pytest.fixture
def received():
    events = []

    def receiver(signal, sender, run, **extra):
        events.append((signal, run.pk, run.status, extra))

    hooked = [
        signals.run_started,
        signals.run_succeeded,
        signals.run_failed,
        signals.run_retrying,
        signals.run_skipped,
    ]
    for s in hooked:
        s.connect(receiver, weak=False)
    yield events
    for s in hooked:
        s.disconnect(receiver)


# -- in process -------------------------------------------------------------------------------


def test_a_run_is_claimed_executed_and_recorded(received):
    job = make_job(args=["hello"])
    run = apply(make_run(job))
    assert run.status == RunStatus.SUCCESS
    assert run.attempt == 1
    assert run.started_at
    assert run.finished_at
    assert run.duration is not None
    assert run.worker.endswith(f":{os.getpid()}")
    assert Execution.objects.filter(label="hello").count() == 1
    assert run.result.isdigit()
    assert [(s, status) for s, _, status, _ in received] == [
        (signals.run_started, RunStatus.RUNNING),
        (signals.run_succeeded, RunStatus.SUCCESS),
    ]


def test_a_second_delivery_of_the_same_message_does_nothing_and_is_counted(redis_client):
    job = make_job(args=["once"])
    run = make_run(job)
    before = duplicate_deliveries()
    apply(run)
    apply(run)
    apply(run)
    assert Execution.objects.filter(label="once").count() == 1
    assert duplicate_deliveries() - before == 2


@pytest.mark.parametrize(
    ("attempt", "task_id"),
    [(2, None), (1, "cron-999-20300101T000000Z"), (1, "not-ours")],
)
def test_forged_or_stale_messages_do_not_run_anything(attempt, task_id):
    job = make_job(args=["forged"])
    run = make_run(job)
    apply(run, attempt=attempt, task_id=task_id)
    assert run.status == RunStatus.QUEUED
    assert not Execution.objects.filter(label="forged").exists()


def test_a_message_for_an_unknown_run_is_dropped():
    execute_run.apply(args=(987654, 1), task_id="cron-1-20300101T000000Z")
    assert not JobRun.objects.exists()


def test_a_message_well_before_its_run_is_due_runs_nothing_and_is_no_duplicate(caplog):
    """A run recorded ahead is never run before it is due, whoever sent its message."""
    job = make_job(args=["early"])
    run = make_run(job)
    JobRun.objects.filter(pk=run.pk).update(due_at=database_now() + timedelta(seconds=60))
    before = duplicate_deliveries()
    apply(run)
    assert run.status == RunStatus.QUEUED
    assert run.started_at is None
    assert not Execution.objects.filter(label="early").exists()
    assert duplicate_deliveries() == before
    assert any("run.early_message" in r.getMessage() for r in caplog.records)


def test_a_message_a_moment_before_its_run_is_due_waits_for_it_then_runs():
    job = make_job(args=["just-early"])
    run = make_run(job)
    due = database_now() + timedelta(seconds=0.6)
    JobRun.objects.filter(pk=run.pk).update(due_at=due)
    run = apply(run)
    assert run.status == RunStatus.SUCCESS
    assert run.started_at >= due
    assert Execution.objects.filter(label="just-early").count() == 1


def test_a_failure_with_retries_left_becomes_retrying_attempt_two(received):
    job = make_job(task="tests.flaky", args=["flaky-1", 5], max_retries=2, retry_backoff=30)
    before = timezone.now()
    run = apply(make_run(job))
    after = timezone.now()
    assert run.status == RunStatus.RETRYING
    assert run.attempt == 2
    assert "RuntimeError: flaky-1: failing on purpose" in run.error
    assert "Traceback" in run.traceback
    # The delay (15-30 s) counts from the failure, between ``before`` and ``after``.
    assert (run.retry_at - before).total_seconds() >= 15
    assert (run.retry_at - after).total_seconds() <= 30
    retrying = [extra for s, _, _, extra in received if s is signals.run_retrying]
    assert 15 <= retrying[0]["delay"] <= 30


def test_the_last_attempt_fails_with_error_and_traceback(received):
    job = make_job(task="tests.flaky", args=["flaky-2", 5], max_retries=1)
    run = make_run(job)
    apply(run)  # attempt 1 fails -> retrying, attempt 2
    run = apply(run, attempt=2)
    assert run.status == RunStatus.FAILED
    assert run.attempt == 2
    assert "failing on purpose" in run.error
    assert "Traceback" in run.traceback
    assert signals.run_failed in [s for s, *_ in received]
    assert JobRun.objects.filter(status=RunStatus.FAILED).count() == 1  # the dead-letter view


def test_an_unregistered_task_is_recorded_as_a_failure(message_form):
    job = make_job()
    JobDefinition.objects.filter(pk=job.pk).update(task="tests.vanished")
    run = make_run(job)
    if message_form == "execute_run":
        run = apply(run)
    else:
        # A worker's consumer refuses a message naming a task it does not have, before any task
        # code runs, and says so with task_unknown (what it sends is what is sent here).
        from types import SimpleNamespace

        from celery.signals import task_unknown

        from django_cluster_cron.ledger.outbox import OutboxMessage
        from django_cluster_cron.wire.celery import headers_for

        message = SimpleNamespace(headers=headers_for(OutboxMessage.for_run(run)))
        task_unknown.send(
            sender=None,
            message=message,
            exc=KeyError(job.task),
            name="tests.vanished",
            id=run.task_id,
        )
        run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "tests.vanished" in run.error


def test_a_receiver_that_raises_does_not_break_the_run():
    def broken(**kwargs):
        raise RuntimeError("alerting is down")

    signals.run_succeeded.connect(broken, weak=False)
    try:
        run = apply(make_run(make_job(args=["robust"])))
    finally:
        signals.run_succeeded.disconnect(broken)
    assert run.status == RunStatus.SUCCESS


def test_overlap_skip_at_execution_records_skipped_while_another_run_holds_the_job(received):
    from django_cluster_cron.locks import ClusterLock

    job = make_job(args=["overlap"], overlap_policy="skip")
    holder = ClusterLock(f"job:{job.pk}", ttl=30)
    assert holder.acquire()
    try:
        run = apply(make_run(job))
    finally:
        holder.release()
    assert run.status == RunStatus.SKIPPED
    assert "another run of this job is executing" in run.reason
    assert not Execution.objects.filter(label="overlap").exists()
    assert signals.run_skipped in [s for s, *_ in received]


def test_a_task_body_knows_its_run_through_current_run():
    from django_cluster_cron.worker import current_run

    job = make_job(task="tests.whoami")
    run = apply(make_run(job))
    assert run.status == RunStatus.SUCCESS
    assert run.result == repr([run.pk, 1, run.task_id])
    assert current_run() is None  # reset after the body


def test_the_heartbeat_reconnects_after_its_database_connection_is_cut(settings):
    """Regression (chaos suite): a terminated connection silenced the heartbeat for good, so
    the leader declared a healthy run lost and ran it again."""
    from django.db import connection

    from django_cluster_cron.worker.heartbeat import RunHeartbeat

    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server whose sessions could be cut")
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "RUN_HEARTBEAT_INTERVAL": 0.1}
    run = make_run(make_job(), status=RunStatus.RUNNING)
    heartbeat = RunHeartbeat(run)
    heartbeat.start()
    try:
        wait_for(lambda: JobRun.objects.get(pk=run.pk).heartbeat_at, 5, "a first beat")
        cut_other_connections()
        cut_at = timezone.now()
        wait_for(
            lambda: JobRun.objects.get(pk=run.pk).heartbeat_at > cut_at + timedelta(seconds=0.2),
            5,
            "a beat after the cut",
        )
    finally:
        heartbeat.stop()


def test_a_failure_that_killed_the_db_connection_is_still_recorded():
    """Regression (20-minute chaos run): a body that failed because the database connection was
    cut left that dead connection behind; recording the failure raised too, and the run stayed
    'running' until the lost-run sweep, round after round."""
    from django.db import connection

    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server that could terminate a connection")
    run = apply(make_run(make_job(task="tests.cut_own_connection")))
    assert run.status == RunStatus.FAILED
    # The server's own words for a killed session.
    expected = "terminating connection" if connection.vendor == "postgresql" else "killed"
    assert expected in run.error.lower() or "interrupted" in run.error.lower(), run.error
