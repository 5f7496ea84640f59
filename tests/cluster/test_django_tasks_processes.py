"""Jobs whose task is a ``django.tasks`` task, with real processes and nothing but the database:
`run_scheduler` nodes on the database lease and django-tasks-db ``db_worker`` processes.

The task bodies write to the witness table ``testapp.Execution``, independent of the run ledger
and of the backend's own results. In process: tests/database/test_django_tasks.py.
"""

from __future__ import annotations

import os
import signal

import pytest
from django.conf import settings

from django_cluster_cron.dispatch.djtasks import TasksDispatcher
from django_cluster_cron.ledger.outbox import OutboxMessage
from django_cluster_cron.models import JobRun, RunStatus, SchedulerLease
from django_cluster_cron.worker.claim import duplicate_deliveries
from tests.support.cluster import assert_every_slot_once, every_second_job
from tests.support.jobs import make_job, make_run
from tests.support.timing import ttl_outlasting
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
    pytest.mark.skipif(not settings.HAS_DJANGO_TASKS, reason="django-tasks-db is not installed"),
]


def leader() -> str | None:
    holder = SchedulerLease.objects.filter(name="leader").values_list("holder", flat=True).first()
    return holder or None


def finished_after(job, count: int) -> bool:
    return bool(JobRun.objects.filter(job=job, status=RunStatus.SUCCESS).count() >= count)


@pytest.mark.parametrize("lease_kind", ["database"])
def test_three_schedulers_two_db_workers_a_leader_killed_nothing_lost_or_doubled(cluster):
    # Runs recorded (and enqueued) at most 5 s ahead: the last ones end soon after the stop.
    cluster.settings.update({"LOOKAHEAD": 5})
    job = every_second_job("dj-tick", task="tests.testapp.dtasks.record", args=["dj-tick"])
    for name in ("w1", "w2"):
        cluster.db_worker(name)
    for node in ("a", "b", "c"):
        cluster.start(node)
    for name in ("w1", "w2"):
        cluster.wait_db_worker(name)
    first = wait_for(leader, 60, "a leader")
    wait_for(lambda: finished_after(job, 3), 60, "three runs finished on the db_workers")
    cluster.procs[first].kill()
    done_before = JobRun.objects.filter(job=job, status=RunStatus.SUCCESS).count()
    wait_for(lambda: leader() not in (None, first), 60, "another scheduler to lead")
    wait_for(lambda: finished_after(job, done_before + 5), 60, "runs under the new leader")
    for node in ("a", "b", "c"):
        if node != first:
            cluster.procs[node].terminate()
    for node in ("a", "b", "c"):
        cluster.procs[node].wait(30)
    # Every run recorded (no slot missing across the failover) ends, each executed once.
    wait_for(
        lambda: not JobRun.objects.filter(job=job).exclude(status=RunStatus.SUCCESS).exists(),
        90,
        "every recorded run to succeed",
        detail=lambda: str(
            list(JobRun.objects.filter(job=job).exclude(status=RunStatus.SUCCESS).values())
        ),
    )
    slots = assert_every_slot_once(job)
    assert Execution.objects.filter(label="dj-tick").count() == len(slots)
    workers = set(JobRun.objects.filter(job=job).values_list("worker", flat=True))
    assert len(workers) == 2, workers  # both db_workers took runs
    assert not JobRun.objects.filter(job=job, backend_result_id="").exists()


@pytest.mark.parametrize("lease_kind", ["database"])
def test_a_db_worker_killed_mid_run_a_duplicate_runs_nothing_and_the_run_is_retried(cluster):
    # A heartbeat every 0.3 s; a run is lost after a silence that three stalled heartbeats cannot
    # make: a loaded machine must not make a live run look lost.
    cluster.settings.update(
        {"RUN_HEARTBEAT_INTERVAL": 0.3, "RUN_LOST_AFTER": ttl_outlasting(calls=3)}
    )
    doomed = cluster.db_worker("doomed")
    cluster.wait_db_worker("doomed")
    job = make_job(task="tests.testapp.dtasks.slow_first", args=["dj-killed", 60], max_retries=1)
    run = make_run(job)
    before = duplicate_deliveries()
    message = OutboxMessage.for_run(JobRun.objects.select_related("job").get(pk=run.pk))
    assert TasksDispatcher().publish([message, message]) == [run.task_id, run.task_id]
    wait_for(lambda: Execution.objects.filter(label="dj-killed").exists(), 30, "the body to start")
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
    os.kill(doomed.pid, signal.SIGKILL)
    # The second copy goes to the survivor, which loses the claim and runs nothing.
    cluster.db_worker("survivor")
    wait_for(lambda: duplicate_deliveries() == before + 1, 60, "the copy to lose the claim")
    assert Execution.objects.filter(label="dj-killed").count() == 1
    # The leader declares the run lost and sends its next attempt through the backend.
    cluster.start("leader")
    run = wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCESS).first(),
        90,
        "the lost run to be retried and succeed",
        detail=lambda: cluster.log("leader") + cluster.log("survivor"),
    )
    assert run.attempt == 2
    assert Execution.objects.filter(label="dj-killed").count() == 2
    from django_tasks_db.models import DBTaskResult

    # The backend still shows the killed attempt as running: django-tasks-db never reclaims it.
    # (It writes the others' ends just after the wrapper has recorded them in the ledger.)
    def statuses() -> list[str]:
        return sorted(DBTaskResult.objects.values_list("status", flat=True))

    wait_for(
        lambda: statuses() == ["RUNNING", "SUCCESSFUL", "SUCCESSFUL"],
        30,
        "the backend to show the killed attempt running, the copy and the retry successful",
        detail=statuses,
    )
