"""Jobs whose task is a ``django.tasks`` task on a queue-backed backend: django-tasks-rq, RQ on
the suite's Redis, with a real ``rqworker`` process. Runs in the tox environment ``rq`` (see
tox.ini: django-tasks-rq cannot be installed beside django-celery-beat); skipped elsewhere.
"""

from __future__ import annotations

import sys

import pytest
from django.conf import settings

from django_cluster_cron.dispatch.djtasks import TasksDispatcher
from django_cluster_cron.ledger.outbox import OutboxMessage
from django_cluster_cron.models import JobRun, RunStatus
from django_cluster_cron.worker.claim import duplicate_deliveries
from tests.support.jobs import make_job, make_run
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not getattr(settings, "HAS_TASKS_RQ", False),
        reason="django-tasks-rq is installed only in the tox environment 'rq'",
    ),
]


def rq_worker(cluster, name: str):
    """django-rq's worker with django-tasks-rq's job class and RQ's scheduler (run_after)."""
    command = [
        sys.executable, "-m", "django", "rqworker", "default",
        "--job-class", "django_tasks_rq.Job", "--with-scheduler", "--name", name,
    ]  # fmt: skip
    return cluster._spawn(name, command, {})


def message_of(run) -> OutboxMessage:
    return OutboxMessage.for_run(JobRun.objects.select_related("job").get(pk=run.pk))


def test_a_run_enqueued_twice_on_rq_runs_once_and_keeps_rqs_job_id(cluster):
    rq_worker(cluster, "rq-1")
    run = make_run(make_job(task="tests.testapp.rqtasks.record", args=["on-rq"]))
    before = duplicate_deliveries()
    message = message_of(run)
    assert TasksDispatcher().publish([message, message]) == [run.task_id, run.task_id]
    done = wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCESS).first(),
        90,
        "the run to succeed on the RQ worker",
        detail=lambda: cluster.log("rq-1"),
    )
    wait_for(lambda: duplicate_deliveries() == before + 1, 60, "the copy to lose the claim")
    assert Execution.objects.filter(label="on-rq").count() == 1
    from django_cluster_cron.djtasks_app import frameworks

    # The result is the wrapper's: read it through the backend (the task's own get_result()
    # refuses a result of another task).
    backend = frameworks()[0].backend("rq")
    # RQ records the job's end just after the wrapper has recorded it in the ledger.
    result = wait_for(
        lambda: (
            (found := backend.get_result(done.backend_result_id)).status == "SUCCESSFUL" and found
        ),
        30,
        "RQ to record the job finished",
    )
    assert result.task.module_path.startswith("django_cluster_cron.djtasks.run_scheduled_job")
    assert result.kwargs["job"] == done.job.name
    assert result.return_value == Execution.objects.get(label="on-rq").pk


def test_a_retry_waits_for_its_time_in_rqs_scheduler(cluster):
    rq_worker(cluster, "rq-2")
    job = make_job(
        task="tests.testapp.rqtasks.flaky", args=["rq-flaky", 1], max_retries=1, retry_backoff=1
    )
    run = make_run(job)
    TasksDispatcher().publish([message_of(run)])
    done = wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCESS).first(),
        90,
        "the retry to run once RQ's scheduler releases it",
        detail=lambda: cluster.log("rq-2"),
    )
    assert done.attempt == 2
    first, second = Execution.objects.filter(label="rq-flaky").order_by("started_at")
    # Backoff 1 s with jitter from its upper half: the retry did not start early.
    assert (second.started_at - first.started_at).total_seconds() >= 0.5
