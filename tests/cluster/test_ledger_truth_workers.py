"""The ledger says what ran, with real prefork Celery worker processes: a body stopped by its
soft time limit, and the messages Celery discards (revoked, expired, terminated) say so.

The in-process cases are tests/database/test_ledger_truth.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_cluster_cron.models import JobRun, RunStatus
from tests.support.jobs import make_job, make_run, publish
from tests.support.timing import quiet_for, stalls
from tests.support.waiting import wait_for
from tests.testapp.celery import app
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def discarded(log: str, task_id: str) -> int:
    """How many copies of ``task_id``'s message the worker discarded as revoked."""
    return sum(
        1 for line in log.splitlines() if "Discarding revoked task" in line and task_id in line
    )


def test_a_body_stopped_by_its_soft_time_limit_fails_and_one_that_handles_it_succeeds(cluster):
    cluster.worker("w1", concurrency=2)  # time limits need the prefork pool
    cluster.wait_ready("w1")
    stopped = make_run(
        make_job(task="tests.soft_limited", args=["soft-stopped", 10], soft_time_limit=1)
    )
    handled = make_run(
        make_job(
            task="tests.soft_limited",
            kwargs={"label": "soft-handled", "seconds": 10, "catch": True},
            soft_time_limit=1,
        )
    )
    publish(stopped)
    publish(handled)
    stopped = wait_for(
        lambda: JobRun.objects.filter(pk=stopped.pk, status=RunStatus.FAILED).first(),
        30,
        "the stopped body's run to fail",
    )
    assert "SoftTimeLimitExceeded" in stopped.error
    assert stopped.duration < timedelta(seconds=8)
    handled = wait_for(
        lambda: JobRun.objects.filter(pk=handled.pk, status=RunStatus.SUCCESS).first(),
        30,
        "the handling body's run to succeed",
    )
    assert handled.result == repr("cleaned up after the soft time limit")
    for label in ("soft-stopped", "soft-handled"):
        # The witness row was written before the limit, and never finished: the body stopped.
        assert Execution.objects.get(label=label).finished_at is None


def test_messages_celery_discards_say_why_in_the_ledger(cluster):
    cluster.worker("w1", concurrency=2)
    cluster.wait_ready("w1")
    job = make_job(args=["discarded"])
    revoked = make_run(job)
    # The worker has the revoke (its reply says so) before the message reaches it.
    replies = app.control.revoke(revoked.task_id, reply=True, limit=1, timeout=30)
    assert replies, "the worker did not answer the revoke"
    publish(revoked)

    late = make_job(args=["late"], expires=1)
    expired = make_run(late)  # its slot lies in the past: slot + 1 s has gone by
    publish(expired)

    running_job = make_job(task="tests.sleep", args=[30])
    running = make_run(running_job)
    publish(running)
    wait_for(
        lambda: JobRun.objects.filter(pk=running.pk, status=RunStatus.RUNNING).exists(),
        30,
        "the long run to start",
    )
    # The worker's main process learns that a pool process took a message a moment after the
    # body starts; a terminating revoke that arrives before that finds no task to terminate
    # (Celery's "terminate: tasks unknown") and the body runs on. Revoke once it is listed.
    wait_for(
        lambda: any(
            request.get("id") == running.task_id
            for requests in (app.control.inspect(timeout=1).active() or {}).values()
            for request in requests
        ),
        30,
        "the worker to list the long run as active",
    )
    app.control.revoke(running.task_id, terminate=True)

    revoked = wait_for(
        lambda: JobRun.objects.filter(pk=revoked.pk, status=RunStatus.CANCELLED).first(),
        30,
        "the revoked run to be cancelled",
    )
    assert revoked.reason == "revoked in Celery before it started"
    expired = wait_for(
        lambda: JobRun.objects.filter(pk=expired.pk, status=RunStatus.MISSED).first(),
        30,
        "the expired run to be missed",
    )
    assert "expired before a worker took it" in expired.reason
    running = wait_for(
        lambda: JobRun.objects.filter(pk=running.pk, status=RunStatus.CANCELLED).first(),
        30,
        "the terminated run to be cancelled",
    )
    assert "terminated while running" in running.reason
    assert not Execution.objects.filter(label__in=["discarded", "late"]).exists()
    # A second copy of the revoked message changes nothing: the worker discards it...
    publish(revoked)
    wait_for(
        lambda: discarded(cluster.log("w1"), revoked.task_id) >= 2,
        30,
        "the worker to discard the second copy",
    )
    # ...and a negative check needs time to pass: a stall's time for any late write to land.
    quiet_for(
        stalls(1),
        lambda: JobRun.objects.get(pk=revoked.pk).status != RunStatus.CANCELLED,
        "the cancelled run's status changing",
    )
