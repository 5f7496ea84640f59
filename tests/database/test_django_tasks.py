"""Runs of ``django.tasks`` tasks, in process: enqueued by the django.tasks adapter on the
suite's django-tasks-db backend and run by that backend's own worker (``db_worker``'s
``Worker``, here in this process), or by the immediate backend inside the enqueue.

What the ledger says and what the backend says must agree, run for run. Worker processes, the
scheduler and a killed worker: tests/cluster/test_django_tasks_processes.py.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.dispatch import prepare, publish_now
from django_cluster_cron.dispatch.djtasks import TasksDispatcher, TasksGroup
from django_cluster_cron.djtasks import NOT_RUN
from django_cluster_cron.ledger.outbox import OutboxMessage
from django_cluster_cron.models import JobRun, RunStatus
from django_cluster_cron.worker.claim import duplicate_deliveries
from tests.support.jobs import make_job, make_run
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.HAS_DJANGO_TASKS, reason="django-tasks-db is not installed"),
]


def drain(backend: str = "default") -> None:
    """Run every task ready on the database backend, as ``db_worker --batch`` does."""
    from django_tasks_db.management.commands.db_worker import Worker

    Worker(
        queue_names=["*"],
        interval=0,
        batch=True,
        backend_name=backend,
        startup_delay=False,
        max_tasks=None,
        worker_id="test-worker",
        excluded_queue_names=[],
    ).run()


def results():
    from django_tasks_db.models import DBTaskResult

    return list(DBTaskResult.objects.order_by("enqueued_at"))


def send(run, **changes):
    message = OutboxMessage.for_run(run)
    for name, value in changes.items():
        object.__setattr__(message, name, value)
    return TasksDispatcher().publish([message])


def test_a_run_is_enqueued_on_its_tasks_backend_and_runs_once():
    job = make_job(task="tests.testapp.dtasks.record", args=["one"])
    run = make_run(job)
    assert send(run) == [run.task_id]
    [enqueued] = results()
    assert enqueued.task_path == "django_cluster_cron.djtasks.run_scheduled_job_backport" or (
        enqueued.task_path == "django_cluster_cron.djtasks.run_scheduled_job"
    )
    shown = enqueued.args_kwargs["kwargs"]
    assert shown["job"] == job.name
    assert shown["task"] == "tests.testapp.dtasks.record"
    assert (shown["run"], shown["attempt"], shown["task_id"]) == (run.pk, 1, run.task_id)
    drain()
    run.refresh_from_db()
    [done] = results()
    assert run.status == RunStatus.SUCCESS
    assert done.status == "SUCCESSFUL"
    assert run.backend_result_id == str(done.id)
    witness = Execution.objects.get(label="one")
    assert done.return_value == witness.pk
    assert run.result == repr(witness.pk)


def test_a_second_delivery_of_a_run_runs_nothing_and_says_so():
    job = make_job(task="tests.testapp.dtasks.record", args=["twice"])
    run = make_run(job)
    before = duplicate_deliveries()
    send(run)
    send(run)  # the outbox sent it again, or the backend delivers it twice
    drain()
    assert Execution.objects.filter(label="twice").count() == 1
    first, second = results()
    assert (first.status, second.status) == ("SUCCESSFUL", "SUCCESSFUL")
    assert NOT_RUN in second.return_value
    assert "another delivery" in second.return_value[NOT_RUN]
    assert duplicate_deliveries() == before + 1
    run.refresh_from_db()
    assert (run.status, run.backend_result_id) == (RunStatus.SUCCESS, str(first.id))


def test_a_failure_is_retried_through_the_backend_with_run_after_and_shown_failed_there():
    job = make_job(
        task="tests.testapp.dtasks.flaky", args=["flaky", 1], max_retries=2, retry_backoff=3
    )  # the retry is due 1.5-3 s later: a stalled first drain cannot reach it
    run = make_run(job)
    send(run)
    drain()
    run.refresh_from_db()
    assert (run.status, run.attempt) == (RunStatus.RETRYING, 2)
    assert "failing on purpose" in run.error
    [failed, retry] = results()
    assert failed.status == "FAILED"
    assert failed.exception_class_path == "builtins.RuntimeError"
    assert retry.status == "READY"
    assert retry.run_after is not None
    assert retry.run_after > failed.finished_at
    assert retry.args_kwargs["kwargs"]["attempt"] == 2

    def retried() -> bool:
        drain()
        run.refresh_from_db()
        return bool(run.status == RunStatus.SUCCESS)

    wait_for(retried, 30, "the retry to run once its run_after passed")
    assert run.backend_result_id == str(results()[1].id)
    assert Execution.objects.filter(label="flaky").count() == 2


def test_a_final_failure_is_failed_in_both_with_the_tasks_own_error():
    job = make_job(task="tests.testapp.dtasks.flaky", args=["final", 5])
    run = make_run(job)
    send(run)
    drain()
    run.refresh_from_db()
    [failed] = results()
    assert run.status == RunStatus.FAILED
    assert run.error == "RuntimeError: final: failing on purpose"
    assert failed.status == "FAILED"
    assert "final: failing on purpose" in failed.traceback


def test_the_task_sees_its_run_and_a_task_that_takes_context_gets_the_wrappers():
    run = make_run(make_job(task="tests.testapp.dtasks.whoami"))
    send(run)
    drain()
    [seen] = results()
    assert seen.return_value == [run.pk, 1, run.task_id]

    other = make_run(make_job(task="tests.testapp.dtasks.with_context", args=["ctx"]))
    send(other)
    drain()
    other.refresh_from_db()
    assert other.status == RunStatus.SUCCESS
    assert other.result == repr(f"ctx:{other.backend_result_id}")


def test_a_return_value_the_backend_cannot_store_is_kept_as_its_repr():
    run = make_run(make_job(task="tests.testapp.dtasks.unjsonable"))
    send(run)
    drain()
    run.refresh_from_db()
    [done] = results()
    assert (run.status, done.status) == (RunStatus.SUCCESS, "SUCCESSFUL")
    assert done.return_value == "{1, 2}"


def test_an_expired_message_is_recorded_missed_and_runs_nothing():
    run = make_run(make_job(task="tests.testapp.dtasks.record", args=["late"], expires=1))
    send(run, expires=timezone.now() - timedelta(seconds=1))
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.MISSED
    assert not Execution.objects.filter(label="late").exists()
    assert NOT_RUN in results()[0].return_value


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        # A queue the backend does not have (a raw edit, or the backend's QUEUES changed since).
        (
            {"queue": "nowhere"},
            "Backend 'default' has no queue 'nowhere' (it has: default, reports)",
        ),
        # A priority outside the range the backend takes: the same words as the job's form.
        ({"priority": 200}, "Backend 'default' refuses priority 200"),
    ],
)
def test_a_task_that_cannot_be_enqueued_fails_its_run_and_not_the_batch(edit, said):
    good = make_run(make_job(task="tests.testapp.dtasks.record", args=["good"]))
    bad_job = make_job(task="tests.testapp.dtasks.record", args=["bad"])
    type(bad_job).all_objects.filter(pk=bad_job.pk).update(**edit)
    bad = make_run(type(bad_job).all_objects.get(pk=bad_job.pk))
    messages = [OutboxMessage.for_run(JobRun.objects.get(pk=r.pk)) for r in (bad, good)]
    # The adapter says which run it could not send, and why, and writes nothing itself.
    published = TasksDispatcher().publish(messages)
    assert published == [good.task_id]
    assert [refusal.run_id for refusal in published.refused] == [bad.pk]
    assert said in published.refused[0].reason
    bad.refresh_from_db()
    assert bad.status != RunStatus.FAILED
    # The one send flow records it failed, with the reason.
    sent = publish_now(TasksDispatcher(), messages[:1], now=database_now())
    assert sent.messages == []
    bad.refresh_from_db()
    assert bad.status == RunStatus.FAILED
    assert said in bad.error
    drain()
    assert Execution.objects.filter(label="good").count() == 1


def test_the_immediate_backend_runs_the_run_inside_the_enqueue():
    run = make_run(make_job(task="tests.testapp.dtasks.record_at_once", args=["now"]))
    assert send(run) == [run.task_id]
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCESS
    assert run.backend_result_id
    assert Execution.objects.filter(label="now").count() == 1
    assert results() == []  # nothing went through the database backend


class TestValidation:
    def test_a_django_tasks_task_is_a_jobs_task(self):
        make_job(task="tests.testapp.dtasks.record", args=["x"])

    def test_what_is_not_a_task_is_refused_with_both_kinds_named(self):
        with pytest.raises(ValidationError) as caught:
            make_job(task="tests.testapp.dtasks.task")
        assert "nor the path of a django.tasks task" in str(caught.value)

    def test_a_queue_the_backend_does_not_have_is_refused(self):
        with pytest.raises(ValidationError) as caught:
            make_job(task="tests.testapp.dtasks.record", queue="nowhere")
        assert caught.value.message_dict["queue"] == [
            "Backend 'default' has no queue 'nowhere' (it has: default, reports)."
        ]

    def test_a_priority_the_backend_refuses_is_refused(self):
        with pytest.raises(ValidationError) as caught:
            make_job(task="tests.testapp.dtasks.record", priority=200)
        assert "priority" in caught.value.message_dict
        assert "200" in caught.value.message_dict["priority"][0]

    def test_the_tasks_own_queue_is_used_when_the_job_has_none(self):
        run = make_run(make_job(task="tests.testapp.dtasks.in_reports", args=["r"]))
        send(run)
        assert results()[0].queue_name == "reports"


def test_a_retry_on_a_backend_that_cannot_defer_waits_in_the_ledger_for_the_outbox():
    job = make_job(
        task="tests.testapp.dtasks.fail_at_once", args=["no-defer"], max_retries=1, retry_backoff=30
    )
    run = make_run(job)
    send(run)
    run.refresh_from_db()
    # Failed once, inside the enqueue; the next attempt is not enqueued early (the claim does not
    # wait for a retry's time): it stays retrying, unsent, for the leader's outbox once due.
    assert (run.status, run.attempt, run.publish_count) == (RunStatus.RETRYING, 2, 0)
    assert run.republish_at == run.retry_at
    assert Execution.objects.filter(label="no-defer").count() == 1


def test_the_overlap_policy_skips_a_run_while_another_holds_the_job():
    from django_cluster_cron.leases.lock import ClusterLock

    job = make_job(task="tests.testapp.dtasks.record", args=["overlap"], overlap_policy="skip")
    run = make_run(job)
    held = ClusterLock(f"job:{job.pk}", ttl=30)
    assert held.acquire()
    try:
        send(run)
        drain()
    finally:
        held.release()
    run.refresh_from_db()
    assert run.status == RunStatus.SKIPPED
    assert not Execution.objects.filter(label="overlap").exists()
    assert "overlap policy 'skip'" in results()[0].return_value[NOT_RUN]


class TestRouting:
    """The scheduler's dispatcher sends each run through the system its job's task belongs to."""

    def runs(self):
        celery_run = make_run(make_job(task="tests.add", args=[1, 2]))
        tasks_run = make_run(make_job(task="tests.testapp.dtasks.record", args=["routed"]))
        return [
            OutboxMessage.for_run(JobRun.objects.select_related("job").get(pk=run.pk))
            for run in (celery_run, tasks_run)
        ]

    def test_a_batch_of_both_kinds_goes_to_both_systems(self, redis_client):
        from django_cluster_cron.dispatch import default_dispatcher

        celery_message, tasks_message = self.runs()
        sent = default_dispatcher().publish([celery_message, tasks_message])
        assert sorted(sent) == sorted([celery_message.task_id, tasks_message.task_id])
        [enqueued] = results()
        assert enqueued.args_kwargs["kwargs"]["task_id"] == tasks_message.task_id
        in_broker = [
            json.loads(raw)["headers"]["id"] for raw in redis_client.lrange("celery", 0, -1)
        ]
        assert in_broker == [celery_message.task_id]

    def test_a_broker_that_fails_does_not_hold_up_the_django_tasks_runs(self, monkeypatch):
        from django_cluster_cron.dispatch import PublishFailed, default_dispatcher
        from django_cluster_cron.dispatch.celery import sender

        def broker_gone(self, message):
            raise ConnectionError("broker went away")

        monkeypatch.setattr(sender.BatchSender, "send", broker_gone)
        celery_message, tasks_message = self.runs()
        with pytest.raises(PublishFailed) as failed:
            default_dispatcher().publish([celery_message, tasks_message])
        assert failed.value.published == [tasks_message.task_id]
        assert "broker went away" in str(failed.value.cause)
        assert len(results()) == 1


def test_runs_enqueued_ahead_are_not_enqueued_again_by_a_leader_that_takes_them_over():
    from django_cluster_cron.ledger.outbox import unpublished_runs

    job = make_job(task="tests.testapp.dtasks.record", args=["ahead"])
    runs = [make_run(job, status=RunStatus.PENDING) for _ in range(3)]
    messages = [OutboxMessage.for_run(JobRun.objects.get(pk=r.pk)) for r in runs]
    # The leader that recorded them ahead, through the send flow: the adapter says which it
    # enqueued ahead, and the flow records that on their rows.
    groups = prepare(TasksDispatcher(), messages)
    assert all(isinstance(group, TasksGroup) and group.enqueued for group in groups)
    ids = {str(r.id) for r in results()}
    assert len(ids) == 3
    # The rows say so: a new leader's take-over reads them back and sends nothing twice.
    taken_over = unpublished_runs(after=None, limit=10)
    assert {m.enqueued for m in taken_over} == ids
    assert all(
        isinstance(group, TasksGroup) and group.enqueued
        for group in TasksDispatcher().prepare(taken_over)
    )
    assert sorted(TasksDispatcher().publish(taken_over)) == sorted(r.task_id for r in runs)
    assert len(results()) == 3
    drain()
    assert Execution.objects.filter(label="ahead").count() == 3
    assert set(JobRun.objects.values_list("status", flat=True)) == {RunStatus.SUCCESS}


def test_a_run_leaves_this_processes_choice_of_connection_as_it_was():
    """The wrapper claims and records on its own connection while it runs, then puts back what
    the process had chosen: a process that is no worker (a web process on the immediate
    backend, this test run) must not have its Celery tasks recorded on another connection."""
    from django_cluster_cron.ledger.statements import use_own_connection

    previous = use_own_connection(False)
    try:
        send(make_run(make_job(task="tests.testapp.dtasks.record", args=["choice"])))
        drain()
        assert use_own_connection(False) is False
    finally:
        use_own_connection(previous)
    assert Execution.objects.filter(label="choice").count() == 1


def test_a_runs_own_kwargs_reach_the_task_through_the_backend():
    from django_cluster_cron import actions

    job = make_job(task="tests.testapp.dtasks.record", args=[], kwargs={"label": "jobs-own"})
    run = actions.run_now(job, by="test", kwargs={"label": "this-run"})
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCESS
    assert Execution.objects.filter(label="this-run").count() == 1
    assert not Execution.objects.filter(label="jobs-own").exists()
