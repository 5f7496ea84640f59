"""What Celery's own tools see of scheduled runs, with real worker processes: the event stream
Flower and ``celery events`` read, the worker's log, and a project's task signal receivers.

A run is its job's task to all of them (name, arguments, result); a failing job is FAILURE with
its exception; a retry is a retry; a copy that loses the claim is ignored, never a second
execution or a success. In process: tests/database/test_what_celery_sees.py.
"""

from __future__ import annotations

import pytest

from django_cluster_cron.models import JobRun, RunStatus
from tests.support.jobs import make_job, make_run, publish
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = [pytest.mark.any_database, pytest.mark.django_db(transaction=True)]


def test_flower_sees_the_jobs_task_its_arguments_result_and_failure(cluster, events):
    cluster.worker("w1", args=["-E"], TEST_LOG_TASK_SIGNALS="1")
    cluster.wait_ready("w1")
    events.wait_subscribed()

    good = make_run(make_job(task="tests.add", args=[2, 3]))
    bad = make_run(make_job(task="tests.add", args=["one", 2], max_retries=0))
    publish(good)
    publish(bad)

    received = events.wait(good.task_id, "task-received")
    assert received["name"] == "tests.add"
    assert received["args"] == "[2, 3]"
    succeeded = events.wait(good.task_id, "task-succeeded")
    assert succeeded["result"] == "5"

    failed = events.wait(bad.task_id, "task-failed")
    assert failed["exception"].startswith("TypeError(")
    assert events.of(bad.task_id, "task-received")[0]["name"] == "tests.add"
    assert not events.of(bad.task_id, "task-succeeded")
    bad.refresh_from_db()
    assert bad.status == RunStatus.FAILED
    assert bad.error.startswith("TypeError")

    log = cluster.log("w1")
    assert f"seen task_prerun task=tests.add id={good.task_id} args=[2, 3]" in log
    assert f"seen task_failure task=tests.add id={bad.task_id} exception=TypeError(" in log
    # The worker's own log names the job's task, as for any task.
    assert f"Task tests.add[{good.task_id}] succeeded" in log


def test_a_retry_is_a_retry_and_a_duplicate_is_ignored(cluster, events):
    cluster.worker("w1", args=["-E"])
    cluster.wait_ready("w1")
    events.wait_subscribed()

    job = make_job(task="tests.flaky", args=["seen-retry", 1], max_retries=2, retry_backoff=0.2)
    run = make_run(job)
    publish(run, copies=2)
    wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCESS).exists(), 60, "success"
    )
    retried = events.wait(run.task_id, "task-retried")
    assert "failing on purpose" in retried["exception"]
    events.wait(run.task_id, "task-succeeded")
    # Two attempts ran the body; the second copy of the first message was dropped by the claim:
    # ignored in the worker's log, never a third execution or another success.
    assert Execution.objects.filter(label="seen-retry").count() == 2
    log = cluster.log("w1")
    wait_for(lambda: f"Task tests.flaky[{run.task_id}] ignored" in cluster.log("w1"), 30, "ignored")
    assert log.count(f"Task tests.flaky[{run.task_id}] succeeded") == 1


def test_a_body_asking_celery_to_retry_runs_once_per_attempt(cluster):
    cluster.worker("w1")
    cluster.wait_ready("w1")
    job = make_job(task="tests.retry_self", max_retries=1, retry_backoff=0.2)
    run = make_run(job)
    publish(run)
    run = wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.FAILED).first(), 60, "failure"
    )
    # Attempt 1 asked for a retry, the job's policy granted one, attempt 2 asked again and the
    # job's retries were spent. The copies Celery's own retry() sent (with a 1 s countdown) each
    # lose the claim.
    assert run.attempt == 2
    wait_for(
        lambda: cluster.log("w1").count("run.duplicate_delivery") >= 2,
        60,
        "the copies sent by retry() dropped",
    )
    assert cluster.log("w1").count(f"Task tests.retry_self[{run.task_id}] received") == 4
