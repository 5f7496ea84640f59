"""What Celery itself sees of a run sent as its job's own task, in process (Celery's ``apply``
with the wrapper every worker installs): the task's state and result, and the task signals.

The ledger and Celery must tell the same story: SUCCESS with the body's result, FAILURE with the
body's own exception, RETRY when the job retries, IGNORED for a copy that lost the claim. Real
worker processes and Celery's event stream: tests/cluster/test_what_celery_sees.py.
"""

from __future__ import annotations

import pytest
from celery import signals as celery_signals
from celery import states

from django_cluster_cron.models import JobRun, RunStatus
from django_cluster_cron.worker.claim import duplicate_deliveries
from tests.support.httpserver import sentry_items, sentry_stand_in
from tests.support.jobs import apply_own_task, make_job, make_run
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def seen():
    """(signal name, task name, extra) for each Celery task signal this process sends."""
    events = []
    wanted = {
        "task_prerun": celery_signals.task_prerun,
        "task_postrun": celery_signals.task_postrun,
        "task_success": celery_signals.task_success,
        "task_failure": celery_signals.task_failure,
        "task_retry": celery_signals.task_retry,
    }
    receivers = {}
    for name, signal in wanted.items():

        def receiver(sender=None, _name=name, **info):
            task = sender if hasattr(sender, "name") else info.get("task")
            events.append((_name, getattr(task, "name", None), info))

        receivers[name] = receiver
        signal.connect(receiver, weak=False)
    yield events
    for name, signal in wanted.items():
        signal.disconnect(receivers[name])


def names(events):
    return [(signal, task) for signal, task, _info in events]


def test_a_run_is_the_jobs_task_to_celery_with_its_result(seen):
    job = make_job(task="tests.add", args=[2, 3])
    run = make_run(job)
    result = apply_own_task(run)
    assert result.state == states.SUCCESS
    assert result.result == 5
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCESS
    assert run.result == "5"
    assert names(seen) == [
        ("task_prerun", "tests.add"),
        ("task_success", "tests.add"),
        ("task_postrun", "tests.add"),
    ]
    prerun = seen[0][2]
    assert prerun["task_id"] == run.task_id
    assert list(prerun["args"]) == [2, 3]


def test_a_failed_run_is_failure_with_the_bodys_exception(seen):
    job = make_job(task="tests.add", args=["one", 2], max_retries=0)
    run = make_run(job)
    result = apply_own_task(run)
    assert result.state == states.FAILURE
    assert isinstance(result.result, TypeError)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error.startswith("TypeError")
    assert ("task_failure", "tests.add") in names(seen)
    failure = next(info for signal, _task, info in seen if signal == "task_failure")
    assert isinstance(failure["exception"], TypeError)
    assert failure["task_id"] == run.task_id


def test_a_retried_run_is_retry_to_celery_and_its_next_attempt_is_queued(seen):
    job = make_job(task="tests.fail", max_retries=2, retry_backoff=30)
    run = make_run(job)
    result = apply_own_task(run)
    assert result.state == states.RETRY
    run.refresh_from_db()
    assert run.status == RunStatus.RETRYING
    assert run.attempt == 2
    assert ("task_retry", "tests.fail") in names(seen)
    assert not [s for s in names(seen) if s[0] == "task_failure"]


def test_the_last_attempt_is_failure(seen):
    job = make_job(task="tests.fail", max_retries=1)
    run = make_run(job)
    JobRun.objects.filter(pk=run.pk).update(attempt=2, status=RunStatus.RETRYING)
    result = apply_own_task(run, attempt=2)
    assert result.state == states.FAILURE
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert ("task_failure", "tests.fail") in names(seen)


def test_a_copy_that_loses_the_claim_is_ignored_not_run_or_succeeded(seen):
    job = make_job(task="tests.record", args=["once"])
    run = make_run(job)
    before = duplicate_deliveries()
    assert apply_own_task(run).state == states.SUCCESS
    second = apply_own_task(run)
    assert second.state == states.IGNORED
    assert Execution.objects.filter(label="once").count() == 1
    assert duplicate_deliveries() - before == 1
    assert [s for s in names(seen) if s[0] == "task_success"] == [("task_success", "tests.record")]


def test_a_plain_call_of_a_task_is_not_a_run():
    from tests.testapp.tasks import record

    job = make_job(task="tests.record", args=["plain"])
    run = make_run(job)
    result = record.apply(args=("plain",))  # no run headers: the task as anyone calls it
    assert result.state == states.SUCCESS
    assert record("plain") > 0  # and as a function
    assert Execution.objects.filter(label="plain").count() == 2
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


def test_a_body_asking_celery_for_a_retry_gets_the_jobs_retry(seen):
    job = make_job(task="tests.retry_self", max_retries=1, retry_backoff=30)
    run = make_run(job)
    result = apply_own_task(run)
    run.refresh_from_db()
    # The job's policy decides (its back-off, not the task's countdown). With a real worker the
    # copy Celery's retry sends loses the claim: tests/cluster/test_what_celery_sees.py.
    assert run.status == RunStatus.RETRYING
    assert run.attempt == 2
    assert "try again later" in run.error
    assert result.state == states.RETRY
    assert [s for s in names(seen) if s[0] == "task_retry"] == [("task_retry", "tests.retry_self")]


def test_a_task_of_the_job_that_calls_itself_as_a_function_is_not_claimed_twice():
    before = duplicate_deliveries()
    job = make_job(task="tests.recurse", args=[3])
    run = make_run(job)
    result = apply_own_task(run)
    assert result.state == states.SUCCESS
    assert result.result == 3
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCESS
    assert duplicate_deliveries() == before


# The option every sentry-sdk 2.x takes; the newest deprecates it for data_collection.
@pytest.mark.filterwarnings("ignore:The send_default_pii option is deprecated")
def test_sentrys_celery_integration_reports_the_failed_job_as_its_task():
    """The real sentry-sdk with its Celery integration, reporting to a local stand-in."""
    from sentry_sdk.integrations.celery import CeleryIntegration

    job = make_job(task="tests.add", args=["one", 2], max_retries=0)
    run = make_run(job)
    # send_default_pii: Sentry shows a task's arguments only when told it may.
    with sentry_stand_in([CeleryIntegration()], send_default_pii=True) as server:
        assert apply_own_task(run).state == states.FAILURE
        import sentry_sdk

        sentry_sdk.flush(10)
        [event] = wait_for(lambda: sentry_items(server, "event"), 30, "the error event")
    [exception] = event["exception"]["values"]
    assert exception["type"] == "TypeError"
    assert event["extra"]["celery-job"]["task_name"] == "tests.add"
    assert event["extra"]["celery-job"]["args"] == ["one", 2]
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED


def test_sentry_does_not_report_a_retried_attempt_as_an_error():
    from sentry_sdk.integrations.celery import CeleryIntegration

    job = make_job(task="tests.fail", max_retries=2, retry_backoff=30)
    run = make_run(job)
    with sentry_stand_in([CeleryIntegration()]) as server:
        assert apply_own_task(run).state == states.RETRY
        import sentry_sdk

        sentry_sdk.flush(10)
        assert sentry_items(server, "event") == []
