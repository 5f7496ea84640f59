"""Cancel of a running run with real workers: a Celery prefork worker, a solo one, and a
django-tasks-db ``db_worker``. The body sees the cancel at its next heartbeat, the run ends
``cancelled``, and each system's tools show it as that system shows a task stopped: Celery's
event stream (what Flower reads) and result backend say REVOKED, django.tasks' backend says
the attempt failed with RunCancelled. In process: tests/database/test_cancel.py."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from django_cluster_cron import actions
from django_cluster_cron.models import JobRun, RunStatus
from tests.support.jobs import make_job, make_run, publish
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

HEARTBEAT = 0.5


def started(run, label):
    wait_for(
        lambda: (
            JobRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
            and Execution.objects.filter(label=label).exists()
        ),
        60,
        "the body to start",
    )


def ended(run):
    return wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.CANCELLED).first(),
        60,
        "the run to be recorded cancelled",
        detail=lambda: str(JobRun.objects.filter(pk=run.pk).values().first()),
    )


def seen_after(run, label) -> float:
    """Seconds from the cancel's request (database time) to the body's stop (its witness)."""
    witness = Execution.objects.get(label=label)
    assert witness.finished_at is not None
    return float((witness.finished_at - run.cancel_requested_at).total_seconds())


def test_prefork_a_cancel_reaches_the_body_and_flower_and_the_backend_say_revoked(
    cluster,
    events,
    redis_client,
):
    cluster.settings["RUN_HEARTBEAT_INTERVAL"] = HEARTBEAT
    cluster.worker("w", concurrency=2, args=["-E"], TEST_RESULT_BACKEND="redis")
    cluster.wait_ready("w")
    events.wait_subscribed()
    job = make_job(task="tests.until_cancelled", args=["prefork"])
    run = make_run(job)
    publish(run)
    started(run, "prefork")
    actions.cancel(JobRun.objects.get(pk=run.pk), by="alice", reason="cancelled by alice")
    run = ended(run)
    assert run.error == "cancelled while running: the body returned 'stopped at the cancel'"
    assert run.worker_pool == "prefork"
    took = seen_after(run, "prefork")
    print(f"prefork: the body saw the cancel {took:.2f} s after it was asked (beat {HEARTBEAT} s)")
    assert took < 30, took  # seen by a heartbeat, not at the body's own end (60 s)
    revoked = events.wait(run.task_id, "task-revoked")
    assert revoked["terminated"] is False
    assert not events.of(run.task_id, "task-succeeded")
    assert not events.of(run.task_id, "task-failed")
    stored = wait_for(
        lambda: redis_client.get(f"celery-task-meta-{run.task_id}"), 30, "the stored state"
    )
    assert json.loads(stored)["status"] == "REVOKED"
    # The pool process goes on with its next run.
    after = make_run(make_job(task="tests.record", args=["next"]))
    publish(after)
    wait_for(
        lambda: JobRun.objects.get(pk=after.pk).status == RunStatus.SUCCESS, 60, "the next run"
    )


def test_solo_a_job_with_cancel_interrupts_has_its_body_stopped_where_it_is(cluster):
    cluster.settings["RUN_HEARTBEAT_INTERVAL"] = HEARTBEAT
    cluster.worker("solo")
    cluster.wait_ready("solo")
    job = make_job(task="tests.busy", args=["solo"], cancel_interrupts=True)
    run = make_run(job)
    publish(run)
    started(run, "solo")
    actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    run = ended(run)
    assert (
        run.error
        == "cancelled while running: the body stopped (RunCancelled: its run was asked to stop)"
    )
    assert run.worker_pool == "solo"
    assert Execution.objects.get(label="solo").finished_at is None  # stopped mid-body
    after = make_run(make_job(task="tests.record", args=["after-solo"]))
    publish(after)
    wait_for(
        lambda: JobRun.objects.get(pk=after.pk).status == RunStatus.SUCCESS, 60, "the next run"
    )


@pytest.mark.skipif(not settings.HAS_DJANGO_TASKS, reason="django-tasks-db is not installed")
@pytest.mark.parametrize("lease_kind", ["database"])
def test_db_worker_a_cancel_reaches_the_body_and_the_backend_shows_run_cancelled(cluster):
    from django_tasks_db.models import DBTaskResult

    from django_cluster_cron.dispatch.djtasks import TasksDispatcher
    from django_cluster_cron.ledger.outbox import OutboxMessage

    cluster.settings["RUN_HEARTBEAT_INTERVAL"] = HEARTBEAT
    cluster.db_worker("dbw")
    cluster.wait_db_worker("dbw")
    job = make_job(task="tests.testapp.dtasks.until_cancelled", args=["dj"])
    run = make_run(job)
    message = OutboxMessage.for_run(JobRun.objects.select_related("job").get(pk=run.pk))
    TasksDispatcher().publish([message])
    started(run, "dj")
    actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    run = ended(run)
    assert run.worker_pool == "django.tasks"
    took = seen_after(run, "dj")
    print(f"db_worker: the body saw the cancel {took:.2f} s after it was asked")
    assert took < 30, took
    result = wait_for(
        lambda: DBTaskResult.objects.filter(status="FAILED").first(), 30, "the backend's end"
    )
    assert result.exception_class_path.endswith("RunCancelled"), result.exception_class_path


def test_prefork_a_body_that_ignores_the_cancel_is_terminated_after_its_grace(cluster):
    """The leader terminates it (SIGTERM through Celery's revoke) once its grace is over; the
    other pool process's run is untouched, and the worker goes on with the next."""
    cluster.settings["RUN_HEARTBEAT_INTERVAL"] = HEARTBEAT
    cluster.worker("w", concurrency=2)
    cluster.wait_ready("w")
    cluster.start("leader")
    job = make_job(task="tests.busy", args=["stubborn"], cancel_grace=1)
    run = make_run(job)
    neighbour = make_run(make_job(task="tests.record", args=["neighbour", 8]))
    publish(run)
    publish(neighbour)
    started(run, "stubborn")
    started(neighbour, "neighbour")
    actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    run = ended(run)
    assert run.error == "terminated while running: revoked in Celery (signal 15)", run.error
    assert Execution.objects.get(label="stubborn").finished_at is None
    took = (run.finished_at - run.cancel_requested_at).total_seconds()
    print(f"prefork: terminated {took:.2f} s after the cancel (grace 1 s, beat {HEARTBEAT} s)")
    assert "run.terminating" in cluster.log("leader")
    wait_for(
        lambda: JobRun.objects.get(pk=neighbour.pk).status == RunStatus.SUCCESS,
        60,
        "the other pool process's run to end as it would have",
    )
    assert Execution.objects.get(label="neighbour").finished_at is not None
    after = make_run(make_job(task="tests.record", args=["after-terminate"]))
    publish(after)
    wait_for(
        lambda: JobRun.objects.get(pk=after.pk).status == RunStatus.SUCCESS, 60, "the next run"
    )


def test_solo_a_run_past_its_grace_is_not_terminated_where_the_pool_cannot(cluster):
    """A solo pool cannot terminate a task: the run keeps going past its job's grace (the
    leader leaves it, the cancel's answer says so), and ends cancelled when its body ends."""
    cluster.settings["RUN_HEARTBEAT_INTERVAL"] = HEARTBEAT
    cluster.worker("solo")
    cluster.wait_ready("solo")
    cluster.start("leader")
    job = make_job(task="tests.busy", args=["solo-grace", 4], cancel_grace=1)
    run = make_run(job)
    publish(run)
    started(run, "solo-grace")
    asked = actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    assert asked.worker_pool == "solo"
    assert "solo pool cannot terminate a running task" in actions.cancel_outlook(asked)
    run = ended(run)
    assert run.error == "cancelled while running: the body returned 'worked to the end'"
    assert Execution.objects.get(label="solo-grace").finished_at is not None
    assert "run.terminating" not in cluster.log("leader")
