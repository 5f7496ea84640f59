"""The worker side: claims, the run lifecycle, retries, lost workers, execution-side overlap.

In-process tests run the real task through Celery's ``apply`` (no broker); the process tests use
real Celery worker processes on the suite's Redis broker. The task bodies write to the witness
table ``testapp.Execution``, independent of the run ledger.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
import uuid
from datetime import timedelta

import pytest
from django.db.models import Min
from django.utils import timezone

from django_cluster_cron import signals
from django_cluster_cron.dbtime import database_now
from django_cluster_cron.dispatch.celery import CeleryDispatcher
from django_cluster_cron.ledger.outbox import OutboxMessage
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from django_cluster_cron.tasks import execute_run
from django_cluster_cron.worker.claim import duplicate_deliveries
from tests.support.cluster import cut_other_connections, wait_for
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def make_job(task="tests.record", args=None, kwargs=None, **fields):
    job = JobDefinition(
        name=f"job-{uuid.uuid4().hex[:8]}",
        cron="0 0 1 1 *",
        timezone="UTC",
        task=task,
        args=args or [],
        kwargs=kwargs or {},
        enabled=False,
        **fields,
    )
    job.full_clean()
    job.save()
    return job


def make_run(job, status=RunStatus.QUEUED):
    # One second before the job's earliest run: unique per job whatever the clock does between
    # two calls (now-minus-count collided when a second boundary fell between them).
    earliest = JobRun.objects.filter(job=job).aggregate(first=Min("scheduled_for"))["first"]
    slot = (earliest or timezone.now().replace(microsecond=0)) - timedelta(seconds=1)
    return JobRun.objects.create(
        job=job,
        scheduled_for=slot,
        task_id=job.task_id_for(slot),
        trigger=RunTrigger.MANUAL,
        status=status,
    )


def apply(run, attempt=1, task_id=None):
    """Run the real task in this process, as a worker would for one delivered message."""
    execute_run.apply(args=(run.pk, attempt), task_id=task_id or run.task_id)
    run.refresh_from_db()
    return run


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


def test_an_unregistered_task_is_recorded_as_a_failure():
    job = make_job()
    JobDefinition.objects.filter(pk=job.pk).update(task="tests.vanished")
    run = apply(make_run(job))
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


# -- real worker processes ----------------------------------------------------------------------


def publish(run, copies=1):
    run = JobRun.objects.select_related("job").get(pk=run.pk)
    message = OutboxMessage.for_run(run)
    CeleryDispatcher().publish([message] * copies)


@pytest.mark.slow
def test_three_copies_to_two_workers_execute_the_body_once(cluster):
    for name in ("w1", "w2"):
        cluster.worker(name)
    for name in ("w1", "w2"):
        cluster.wait_ready(name)
    job = make_job(args=["copies", 0.2])
    before = duplicate_deliveries()
    runs = [make_run(job) for _ in range(5)]
    for run in runs:
        publish(run, copies=3)
    wait_for(
        lambda: JobRun.objects.filter(status=RunStatus.SUCCESS).count() == 5, 60, "5 successes"
    )
    wait_for(lambda: duplicate_deliveries() - before == 10, 30, "10 duplicates counted")
    assert Execution.objects.filter(label="copies").count() == 5
    assert "run.duplicate_delivery" in cluster.log("w1") + cluster.log("w2")


@pytest.mark.slow
def test_a_failing_task_retries_with_growing_delays_then_fails(cluster):
    cluster.worker("w1")
    cluster.wait_ready("w1")
    job = make_job(
        task="tests.flaky",
        args=["retry", 10],
        max_retries=3,
        retry_backoff=0.4,
        retry_backoff_max=10,
    )
    run = make_run(job)
    publish(run)
    run = wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.FAILED).first(), 60, "failure"
    )
    assert run.attempt == 4
    assert "Traceback" in run.traceback
    starts = list(
        Execution.objects.filter(label="retry")
        .order_by("started_at")
        .values_list("started_at", flat=True)
    )
    assert len(starts) == 4
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    # Un-jittered delays 0.4, 0.8, 1.6 s; jitter draws from the upper half of each.
    for gap, full in zip(gaps, (0.4, 0.8, 1.6), strict=True):
        assert full / 2 <= gap <= full + 1.0, gaps


@pytest.mark.slow
@pytest.mark.parametrize(
    ("policy", "final"), [("retry", RunStatus.SUCCESS), ("fail", RunStatus.FAILED)]
)
def test_a_run_whose_worker_is_killed_mid_body_is_recovered_by_the_leader(cluster, policy, final):
    # Ten heartbeats per lost-after period: a loaded CI machine must not make a live run look lost.
    fast = {"RUN_HEARTBEAT_INTERVAL": 0.3, "RUN_LOST_AFTER": 3, "OUTBOX_REPUBLISH_AFTER": 2}
    cluster.settings.update(fast)
    doomed = cluster.worker("doomed")
    cluster.wait_ready("doomed")
    job = make_job(
        task="tests.slow_first", args=[f"killed-{policy}", 60], max_retries=1, on_worker_lost=policy
    )
    run = make_run(job)
    publish(run)
    # The body has started once its witness row exists (RUNNING is set by the claim, just
    # before the body: a kill in between left no trace, and the retry slept like a first run).
    wait_for(
        lambda: Execution.objects.filter(label=f"killed-{policy}").exists(),
        30,
        "the body to start",
    )
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
    os.kill(doomed.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    cluster.worker("survivor")
    cluster.start("leader")
    run = wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=final).first(),
        60,
        f"the lost run to end {final}",
    )
    print(f"killed worker -> run {final}: {time.monotonic() - killed_at:.2f}s (policy {policy})")
    # The sweep commits the new status, then logs: give the leader a moment to write the line.
    wait_for(lambda: "run.lost" in cluster.log("leader"), 10, "the leader to log run.lost")
    if policy == "retry":
        assert run.attempt == 2
        assert Execution.objects.filter(label=f"killed-{policy}").count() == 2
    else:
        assert run.attempt == 1
        assert "worker lost" in run.error
        assert Execution.objects.filter(label=f"killed-{policy}").count() == 1


@pytest.mark.slow
def test_overlap_skip_with_a_slow_task_on_a_fast_schedule_never_overlaps(cluster):
    cluster.worker("w1", concurrency=2)
    cluster.worker("w2", concurrency=2)
    for name in ("w1", "w2"):
        cluster.wait_ready(name)
    job = JobDefinition(
        name="slow-every-second",
        cron="* * * * * *",
        timezone="UTC",
        task="tests.record",
        args=["slow", 2.5],
        overlap_policy="skip",
    )
    job.full_clean()
    job.save()
    cluster.start("leader")
    wait_for(
        lambda: Execution.objects.filter(label="slow", finished_at__isnull=False).count() >= 2,
        60,
        "two slow bodies",
    )
    JobDefinition.objects.filter(pk=job.pk).update(enabled=False, next_run_at=None)
    wait_for(
        lambda: (
            not JobRun.objects.filter(
                job=job, status__in=[RunStatus.PENDING, RunStatus.QUEUED, RunStatus.RUNNING]
            ).exists()
        ),
        30,
        "the last run to finish",
    )
    bodies = list(
        Execution.objects.filter(label="slow")
        .order_by("started_at")
        .values_list("started_at", "finished_at")
    )
    for (_, end), (start, _) in itertools.pairwise(bodies):
        assert start >= end, f"bodies overlapped: {bodies}"
    assert JobRun.objects.filter(job=job, status=RunStatus.SKIPPED).count() >= 2


@pytest.mark.slow
def test_two_runs_of_a_skip_job_reaching_two_workers_at_once_run_one_body(cluster):
    cluster.worker("w1")
    cluster.worker("w2")
    for name in ("w1", "w2"):
        cluster.wait_ready(name)
    job = make_job(args=["pair", 1.5], overlap_policy="skip")
    first, second = make_run(job), make_run(job)
    publish(first)
    publish(second)
    wait_for(
        lambda: (
            not JobRun.objects.filter(
                job=job, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]
            ).exists()
        ),
        30,
        "both to settle",
    )
    statuses = sorted(JobRun.objects.filter(job=job).values_list("status", flat=True))
    assert statuses == [RunStatus.SKIPPED, RunStatus.SUCCESS]
    assert Execution.objects.filter(label="pair").count() == 1


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
    heartbeat = RunHeartbeat(run.pk, run.attempt)
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
