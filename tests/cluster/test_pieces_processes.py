"""Runs split into pieces on real Celery workers and a real leader.

* a job of 64 pieces every 10 s on three workers, one of them SIGKILLed in the middle of a
  piece: every piece of every slot executed once by the witness (the killed attempt aside), the
  lost piece finished by another worker, the completion task once per run, no run left running;
* a planner's keys become the pieces, on the workers;
* a failing piece fails the run; an operator retries that piece through the REST API and the
  run completes, its completion task sent again.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

from django_cluster_cron.models import (
    FINAL_STATUSES,
    OPEN_PIECE_STATUSES,
    JobDefinition,
    JobPiece,
    JobRun,
    RunStatus,
)
from tests.support.jobs import make_job
from tests.support.timing import ttl_outlasting
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(420)]


def executions(label: str, run: JobRun) -> Counter[int]:
    """How often each piece of ``run`` was executed (its witness rows)."""
    rows = Execution.objects.filter(label__startswith=f"{label}:{run.pk}:")
    return Counter(int(row.label.split(":")[2]) for row in rows)


def completions(run: JobRun) -> list[str]:
    rows = Execution.objects.filter(label__startswith=f"complete:{run.pk}:")
    return list(rows.values_list("label", flat=True))


def test_64_pieces_every_10_seconds_through_a_killed_worker(cluster):
    cluster.settings.update(
        {
            "RUN_HEARTBEAT_INTERVAL": 0.3,
            "RUN_LOST_AFTER": ttl_outlasting(calls=3),
            "OUTBOX_REPUBLISH_AFTER": 5,
        }
    )
    for name in ("a", "b", "c"):
        cluster.worker(name)
    for name in ("a", "b", "c"):
        cluster.wait_ready(name)
    job = JobDefinition(
        name="fleet",
        cron="* * * * * */10",
        timezone="UTC",
        task="tests.piece",
        args=["fleet"],
        kwargs={"seconds": 0.02, "slow": 7},
        pieces=64,
        max_retries=1,
        on_complete="tests.completed",
        catchup_policy="none",
    )
    job.full_clean()
    job.save()
    cluster.start("leader")
    # The first slot's piece 7 runs long at its first attempt: kill its worker in the middle.
    slow = wait_for(
        lambda: JobPiece.objects.filter(run__job=job, index=7, status="running", attempt=1).first(),
        90,
        "piece 7 of the first run to start",
        detail=lambda: cluster.log("leader")[-3000:],
    )
    wait_for(
        lambda: Execution.objects.filter(label=f"fleet:{slow.run_id}:7").exists(),
        30,
        "piece 7's body to start",
    )
    doomed = int(slow.worker.rsplit(":", 1)[1])
    os.kill(doomed, signal.SIGKILL)
    # Later runs' pieces (read from the job at each claim) all run fast.
    JobDefinition.objects.filter(pk=job.pk).update(kwargs={"seconds": 0.02})
    first = JobRun.objects.get(pk=slow.run_id)

    def closed_after_first() -> list[JobRun]:
        runs = JobRun.objects.filter(job=job, scheduled_for__gte=first.scheduled_for)
        done = list(runs.filter(status__in=FINAL_STATUSES).order_by("scheduled_for"))
        return done if len(done) >= 3 else []

    wait_for(
        closed_after_first,
        240,
        "the first run and two more to close",
        detail=lambda: (
            str(list(JobRun.objects.filter(job=job).values_list("pk", "status", "result")))
            + cluster.log("leader")[-2000:]
        ),
    )
    # Stop the schedule (a run recorded ahead is withdrawn); let whatever is in flight end.
    job.refresh_from_db()
    job.pause("the test has seen enough")
    wait_for(
        lambda: (
            not JobRun.objects.filter(
                job=job, status__in=(RunStatus.PENDING, RunStatus.QUEUED, RunStatus.RUNNING)
            ).exists()
        ),
        120,
        "no run of the job left waiting or running",
    )
    runs = list(JobRun.objects.filter(job=job).order_by("scheduled_for"))
    for run in runs:  # what each slot cost, for whoever reads the test's output
        print(f"run {run.pk} slot {run.scheduled_for:%H:%M:%S} took {run.duration} ({run.result})")
    assert runs, "no run recorded"
    for run in runs:
        assert run.status == RunStatus.SUCCESS, (run.pk, run.status, run.result, run.error)
        assert run.piece_count == 64
        assert run.result == "64/64 done"
        counts = executions("fleet", run)
        assert set(counts) == set(range(64)), (run.pk, sorted(set(range(64)) - set(counts)))
        extra = {index: n for index, n in counts.items() if n != 1}
        if run.pk == first.pk:
            # The killed attempt and its retry on another worker; nothing else twice.
            assert extra == {7: 2}, extra
        else:
            assert extra == {}, (run.pk, extra)
        assert completions(run) == [f"complete:{run.pk}:success:success=64"]
        assert not JobPiece.objects.filter(run=run, status__in=OPEN_PIECE_STATUSES).exists()
    lost = JobPiece.objects.get(run=first, index=7)
    assert lost.attempt == 2
    assert lost.worker != slow.worker
    assert "piece.lost" in cluster.log("leader")


def test_a_planner_decides_the_pieces_on_the_workers(cluster):
    from django_cluster_cron import actions

    cluster.worker("a", concurrency=2)
    cluster.wait_ready("a")
    job = make_job(task="tests.piece", args=["planned"], pieces_planner="tests.plan")
    run = actions.run_now(job, by="a test")
    wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCESS).exists(),
        90,
        "the planned run to succeed",
        detail=lambda: cluster.log("a")[-3000:],
    )
    keys = sorted(
        row.split(":", 3)[3]
        for row in Execution.objects.filter(label__startswith=f"planned:{run.pk}:").values_list(
            "label", flat=True
        )
    )
    assert keys == ["match-13", "match-3", "match-5", "match-8"]


def test_a_failed_piece_retried_through_the_api_completes_its_run(cluster, admin_client):
    from django.urls import reverse

    cluster.worker("a", concurrency=2)
    cluster.wait_ready("a")
    job = make_job(
        task="tests.piece",
        args=["api"],
        kwargs={"fail": [3]},
        pieces=6,
        max_failed_pieces=0,
        on_complete="tests.completed",
    )
    from django_cluster_cron import actions

    run = actions.run_now(job, by="a test")
    wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.FAILED).exists(),
        90,
        "the run to fail on its piece 3",
        detail=lambda: cluster.log("a")[-3000:],
    )
    wait_for(lambda: completions(run), 60, "the completion task of the failed run")
    # The cause is fixed; the operator retries piece 3 through the API.
    JobDefinition.objects.filter(pk=job.pk).update(kwargs={})
    url = reverse("cluster_cron_api:run-retry-pieces", args=[run.pk])
    answer = admin_client.post(url, {"indexes": [3]}, content_type="application/json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["status"] == RunStatus.RUNNING
    wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCESS).exists(),
        90,
        "the run to complete after the retry",
        detail=lambda: cluster.log("a")[-3000:],
    )
    run.refresh_from_db()
    assert run.result == "6/6 done"
    assert executions("api", run)[3] == 2
    wait_for(lambda: len(completions(run)) == 2, 60, "the completion task of the new close")
    failed, succeeded = sorted(completions(run))
    assert failed.startswith(f"complete:{run.pk}:failed:"), failed
    assert "failed=1" in failed, failed
    assert succeeded == f"complete:{run.pk}:success:success=6"


def test_a_worker_does_not_open_a_database_connection_per_piece(cluster):
    # As for runs (tests/cluster/test_worker_processes.py): Celery's Django fixup closes the
    # worker thread's connections around every task; a piece's claim, end and look at its run
    # run on the connection of the worker's own.
    from django_cluster_cron import actions

    cluster.worker("w1", TEST_LOG_DB_CONNECTIONS="1")
    cluster.wait_ready("w1")
    job = make_job(task="tests.add", args=[1, 2], pieces=30)  # a body that opens none itself
    run = actions.run_now(job, by="a test")
    wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCESS).exists(),
        90,
        "the run of 30 pieces to succeed",
        detail=lambda: cluster.log("w1")[-3000:],
    )
    opened = cluster.log("w1").count("seen db_connection")
    # Start-up, the worker's own connection, the heartbeat thread's, the split's and the last
    # piece's settle (through the ORM): a handful, not one a piece.
    assert opened <= 6, cluster.log("w1")


@pytest.mark.parametrize(
    ("fields", "status", "result"),
    [
        (
            {"max_failed_pieces": 1, "kwargs": {"fail": [1]}},
            RunStatus.SUCCESS,
            "3/4 done, 1 failed",
        ),
        (
            {"max_parallel_pieces": 1, "pieces_success": "at_least", "pieces_success_count": 2},
            RunStatus.SUCCESS,
            "2/4 done, 2 cancelled",
        ),
        (
            {
                "max_failed_pieces": 3,
                "pieces_success": "required",
                "pieces_required": [0, 2],
                "max_parallel_pieces": 1,
                "kwargs": {"fail": [2]},
            },
            RunStatus.FAILED,
            "2/4 done, 1 failed, 1 cancelled",
        ),
    ],
    ids=["all-within-the-cap", "at-least", "required"],
)
def test_each_success_policy_ends_the_run_as_documented(cluster, fields, status, result):
    from django_cluster_cron import actions

    cluster.worker("a")
    cluster.wait_ready("a")
    job = make_job(task="tests.piece", args=["policy"], pieces=4, **fields)
    run = actions.run_now(job, by="a test")
    wait_for(
        lambda: (
            JobRun.objects.filter(pk=run.pk)
            .exclude(status=RunStatus.RUNNING)
            .exclude(status=RunStatus.QUEUED)
            .exists()
        ),
        90,
        "the run to end",
        detail=lambda: cluster.log("a")[-3000:],
    )
    run.refresh_from_db()
    assert (run.status, run.result) == (status, result), run.error
    assert not JobPiece.objects.filter(run=run, status__in=OPEN_PIECE_STATUSES).exists()
