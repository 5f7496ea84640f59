"""The worker side with real Celery worker processes on the suite's Redis broker: duplicate
deliveries, retries with back-off, a worker killed mid-body, execution-side overlap.

The task bodies write to the witness table ``testapp.Execution``, independent of the run ledger.
The in-process tests of the worker side are tests/database/test_worker.py.
"""

from __future__ import annotations

import itertools
import os
import signal
import time

import pytest

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from django_cluster_cron.worker.claim import duplicate_deliveries
from tests.support.jobs import make_job, make_run, publish
from tests.support.timing import stalls, ttl_outlasting
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


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
    wait_for(
        lambda: duplicate_deliveries() - before == 10,
        60,
        "10 duplicates counted",
        detail=lambda: (
            f"counted {duplicate_deliveries() - before}\n" + cluster.log("w1") + cluster.log("w2")
        ),
    )
    assert Execution.objects.filter(label="copies").count() == 5
    assert "run.duplicate_delivery" in cluster.log("w1") + cluster.log("w2")


def test_a_failing_task_retries_with_growing_delays_then_fails(cluster):
    cluster.worker("w1")
    cluster.wait_ready("w1")
    job = make_job(
        task="tests.flaky",
        args=["retry", 10],
        max_retries=3,
        retry_backoff=1,
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
    # Un-jittered delays 1, 2, 4 s; jitter draws from the upper half of each. The upper bound
    # leaves room for three stalls on each retry's way to a worker.
    for gap, full in zip(gaps, (1, 2, 4), strict=True):
        assert full / 2 <= gap <= full + stalls(3), gaps


@pytest.mark.parametrize(
    ("policy", "final"), [("retry", RunStatus.SUCCESS), ("fail", RunStatus.FAILED)]
)
def test_a_run_whose_worker_is_killed_mid_body_is_recovered_by_the_leader(cluster, policy, final):
    # A heartbeat every 0.3 s; a run is lost after a silence that three stalled heartbeats cannot
    # make: a loaded machine must not make a live run look lost.
    fast = {
        "RUN_HEARTBEAT_INTERVAL": 0.3,
        "RUN_LOST_AFTER": ttl_outlasting(calls=3),
        "OUTBOX_REPUBLISH_AFTER": 2,
    }
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
    wait_for(lambda: "run.lost" in cluster.log("leader"), 30, "the leader to log run.lost")
    if policy == "retry":
        assert run.attempt == 2
        assert Execution.objects.filter(label=f"killed-{policy}").count() == 2
    else:
        assert run.attempt == 1
        assert "worker lost" in run.error
        assert Execution.objects.filter(label=f"killed-{policy}").count() == 1


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


def test_a_worker_does_not_open_a_database_connection_per_run(cluster):
    # Celery's Django fixup closes the worker thread's connections around every task, whatever
    # CONN_MAX_AGE says; the claim and the record run on a connection of their own.
    cluster.worker("w1", TEST_LOG_DB_CONNECTIONS="1")
    cluster.wait_ready("w1")
    job = make_job(task="tests.add", args=[1, 2])
    runs = [make_run(job) for _ in range(30)]
    for run in runs:
        publish(run)
    wait_for(
        lambda: JobRun.objects.filter(job=job, status=RunStatus.SUCCESS).count() == 30,
        60,
        "30 successes",
    )
    opened = cluster.log("w1").count("seen db_connection")
    # Start-up, the run's own connection, the heartbeat thread's: a handful, not one a run.
    assert opened <= 5, cluster.log("w1")
