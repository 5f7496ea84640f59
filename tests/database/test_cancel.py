"""Cancel of a running run, in process: the request on the row, the heartbeat that brings it to
the body, the race with the run's own end, and what the ledger keeps.

Real Celery and django.tasks worker processes are in tests/cluster/test_cancel_processes.py.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from django_cluster_cron import actions, signals
from django_cluster_cron.dbtime import database_now
from django_cluster_cron.ledger import heartbeats, statements, transitions
from django_cluster_cron.ledger.fence import Fence
from django_cluster_cron.models import JobRun, RunStatus
from django_cluster_cron.worker.outcome import Delivery, Ending, Outcome, RunTimer
from django_cluster_cron.worker.record import record
from tests.support.jobs import apply, make_job, make_run
from tests.support.timing import WAIT
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def running(job, attempt=1):
    """A run of ``job`` claimed by a worker (as the claim leaves it), with its job."""
    run = make_run(job)
    claimed = statements.claim_run(run.pk, run.task_id, attempt, "here:1", pool="prefork")
    assert claimed is not None
    return claimed


def status(run):
    return JobRun.objects.get(pk=run.pk).status


# -- the request -------------------------------------------------------------------------------


def test_a_waiting_run_is_cancelled_at_once():
    run = make_run(make_job())
    run = actions.cancel(run, reason="not today", by="alice")
    assert run.status == RunStatus.CANCELLED
    assert run.reason == "not today"
    assert run.cancel_requested_at is None  # nothing ran: nothing to ask


def test_a_running_run_is_asked_to_stop_once_and_says_who_and_why():
    run = running(make_job())
    asked = actions.cancel(run, reason="cancelled by alice", by="alice")
    assert asked.status == RunStatus.RUNNING  # it runs until its body stops
    assert asked.cancel_requested
    assert asked.cancel_requested_by == "alice"
    assert asked.reason == "cancelled by alice"
    assert asked.cancel_requested_at is not None
    assert abs(asked.cancel_requested_at - database_now()) < timedelta(seconds=5)
    with pytest.raises(actions.ActionRefused, match="already asked to stop, by alice"):
        actions.cancel(asked, by="bob")
    assert JobRun.objects.get(pk=run.pk).cancel_requested_by == "alice"


@pytest.mark.parametrize("final", [RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.SKIPPED])
def test_a_run_that_ended_cannot_be_cancelled(final):
    run = make_run(make_job(), status=final)
    with pytest.raises(actions.ActionRefused, match=f"is {final}: only a waiting or running"):
        actions.cancel(run, by="alice")
    assert status(run) == final


def test_what_follows_a_cancel_is_said_in_an_operators_words(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "RUN_HEARTBEAT_INTERVAL": 10}
    job = make_job()
    run = actions.cancel(running(job), by="alice")
    assert "sees it within 10 s" in actions.cancel_outlook(run)
    assert "not terminated" in actions.cancel_outlook(run)
    job.cancel_grace = 30
    job.save(update_fields=["cancel_grace"])
    run.refresh_from_db()
    assert "If it goes on 30 s, it is terminated" in actions.cancel_outlook(run)
    JobRun.objects.filter(pk=run.pk).update(worker_pool="threads")
    run.refresh_from_db()
    assert "threads pool cannot terminate" in actions.cancel_outlook(run)
    JobRun.objects.filter(pk=run.pk).update(worker_pool="django.tasks")
    run.refresh_from_db()
    assert "django.tasks backend cannot stop a running task" in actions.cancel_outlook(run)


# -- the heartbeat's statement brings it back --------------------------------------------------


def test_the_heartbeat_stamps_every_executing_run_and_returns_those_asked_to_stop():
    job = make_job()
    plain, asked, terminating = running(job), running(job), running(job)
    actions.cancel(asked, by="alice")
    JobRun.objects.filter(pk=terminating.pk).update(status=RunStatus.TERMINATING)
    ended = make_run(job, status=RunStatus.SUCCESS)
    elsewhere = running(job)  # its attempt 1; this process beats for attempt 2
    JobRun.objects.update(heartbeat_at=None)

    found = heartbeats.stamp(
        {plain.pk: 1, asked.pk: 1, terminating.pk: 1, ended.pk: 1, elsewhere.pk: 2}
    )

    assert found == {asked.pk: "alice"}
    beaten = set(JobRun.objects.filter(heartbeat_at__isnull=False).values_list("pk", flat=True))
    assert beaten == {plain.pk, asked.pk, terminating.pk}
    assert heartbeats.stamp({plain.pk: 1}) == {}
    assert heartbeats.stamp({}) == {}


# -- the race with the run's own end resolves to one state -------------------------------------


def _delivery():
    return Delivery(dispatcher=lambda: None)  # type: ignore[arg-type,return-value]


def test_a_cancel_that_reached_the_row_before_the_end_makes_the_run_cancelled():
    """The body returned after a cancel the heartbeat had not brought yet: the success write
    finds a cancel asked for and the run is recorded cancelled, with what the body returned."""
    run = running(make_job())
    actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    written = record(_delivery(), run, RunTimer(timezone.now()), Outcome(Ending.SUCCESS, 42))
    assert written == RunStatus.CANCELLED
    after = JobRun.objects.get(pk=run.pk)
    assert after.status == RunStatus.CANCELLED
    assert after.error == "cancelled while running: the body returned 42"
    assert after.result == ""


def test_an_end_that_reached_the_row_before_the_cancel_stands():
    run = running(make_job())
    written = record(_delivery(), run, RunTimer(timezone.now()), Outcome(Ending.SUCCESS, 42))
    assert written == RunStatus.SUCCESS
    with pytest.raises(actions.ActionRefused, match="is success"):
        actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    assert status(run) == RunStatus.SUCCESS


def test_a_cancelled_run_whose_body_then_failed_is_not_retried():
    job = make_job(max_retries=3)
    run = running(job)
    actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    outcome = Outcome(Ending.FAILURE, error=RuntimeError("half done"), trace="Traceback …")
    assert record(_delivery(), run, RunTimer(timezone.now()), outcome) == RunStatus.CANCELLED
    after = JobRun.objects.get(pk=run.pk)
    assert (after.status, after.attempt) == (RunStatus.CANCELLED, 1)
    assert after.error == "cancelled while running: the body failed (RuntimeError: half done)"
    assert after.traceback == "Traceback …"


def test_a_late_end_of_a_run_declared_lost_changes_nothing():
    run = running(make_job())
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.FAILED)
    assert record(_delivery(), run, RunTimer(timezone.now()), Outcome(Ending.SUCCESS, 1)) is None
    assert status(run) == RunStatus.FAILED


def test_a_run_asked_to_stop_whose_worker_died_is_cancelled_never_retried():
    job = make_job(max_retries=3)
    run = running(job)
    actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    JobRun.objects.filter(pk=run.pk).update(heartbeat_at=database_now() - timedelta(hours=1))
    fence = Fence.claim("node", "token")
    lost = transitions.lost(
        now=database_now(), lost_after=timedelta(minutes=1), fence=fence, limit=10
    )
    assert [(found.run.pk, found.retried) for found in lost] == [(run.pk, False)]
    after = JobRun.objects.get(pk=run.pk)
    assert (after.status, after.attempt) == (RunStatus.CANCELLED, 1)
    assert after.error.startswith("cancelled: worker lost")


# -- in a worker's process: the body sees it ---------------------------------------------------


def cancel_once_running(run, by="alice"):
    """Ask the run to stop from another thread as soon as it runs; the thread, to join."""

    def ask():
        wait_for(lambda: status(run) == RunStatus.RUNNING, WAIT, "the run to start")
        actions.cancel(JobRun.objects.get(pk=run.pk), by=by)

    thread = threading.Thread(target=ask)
    thread.start()
    return thread


@pytest.fixture
def fast_heartbeat(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "RUN_HEARTBEAT_INTERVAL": 0.1}


@pytest.fixture
def cancelled_signals():
    seen = []

    def receiver(signal, sender, run, **extra):
        seen.append((run.pk, extra))

    signals.run_cancelled.connect(receiver, weak=False)
    yield seen
    signals.run_cancelled.disconnect(receiver)


def test_a_body_that_checks_stops_at_its_next_heartbeat_and_the_run_is_cancelled(
    fast_heartbeat, cancelled_signals
):
    job = make_job(task="tests.until_cancelled", args=["checks"])
    run = make_run(job)
    asker = cancel_once_running(run)
    run = apply(run)
    asker.join()
    assert run.status == RunStatus.CANCELLED
    assert run.error == "cancelled while running: the body returned 'stopped at the cancel'"
    assert run.cancel_requested_by == "alice"
    assert Execution.objects.get(label="checks").finished_at is not None
    assert cancelled_signals == [
        (run.pk, {"by": "alice", "outcome": run.error}),
    ]


def test_a_job_with_cancel_interrupts_has_run_cancelled_raised_in_its_body(fast_heartbeat):
    job = make_job(task="tests.busy", args=["ignores"], cancel_interrupts=True)
    run = make_run(job)
    asker = cancel_once_running(run)
    started = time.monotonic()
    run = apply(run)
    asker.join()
    assert time.monotonic() - started < 60  # the body's own end is at 60 s
    assert run.status == RunStatus.CANCELLED
    assert (
        run.error
        == "cancelled while running: the body stopped (RunCancelled: its run was asked to stop)"
    )
    assert "RunCancelled" in run.traceback
    # Stopped where it was: the witness of its body never reached its end.
    assert Execution.objects.get(label="ignores").finished_at is None


def test_a_body_can_stop_itself_with_raise_if_cancelled(fast_heartbeat):
    job = make_job(task="tests.echo")
    run = running(job)
    actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    run.refresh_from_db()
    with pytest.raises(Exception, match="cancel requested by alice") as raised:
        run.raise_if_cancelled()
    assert type(raised.value).__name__ == "RunCancelled"


# -- past its grace: terminated where the pool can ---------------------------------------------


def test_a_cancel_grace_is_refused_where_nothing_can_terminate_the_run(settings):
    from django.core.exceptions import ValidationError

    from django_cluster_cron.celery_app import get_celery_app

    job = make_job(task="tests.testapp.dtasks.record", args=["x"])
    job.cancel_grace = 30
    with pytest.raises(ValidationError) as refused:
        job.full_clean()
    assert "django.tasks task cannot be terminated" in str(refused.value.message_dict)
    assert list(refused.value.message_dict) == ["cancel_grace"]

    celery = make_job(task="tests.add", args=[1, 2])
    celery.cancel_grace = 30
    celery.full_clean()  # the app's worker_pool is Celery's default, prefork
    conf = get_celery_app().conf
    before = conf.worker_pool
    conf.worker_pool = "threads"
    try:
        with pytest.raises(ValidationError, match="threads pool cannot terminate"):
            celery.full_clean()
    finally:
        conf.worker_pool = before


def test_the_leader_terminates_only_runs_past_their_grace_on_a_pool_that_can():
    fence = Fence.claim("node", "token")
    job = make_job(cancel_grace=5)
    past, young, threads = running(job), running(job), running(job)
    for run in (past, young, threads):
        actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    now = database_now()
    JobRun.objects.filter(pk__in=[past.pk, threads.pk]).update(
        cancel_requested_at=now - timedelta(seconds=6)
    )
    JobRun.objects.filter(pk=threads.pk).update(worker_pool="threads")
    never = running(make_job())  # no cancel grace: never terminated
    actions.cancel(JobRun.objects.get(pk=never.pk), by="alice")
    JobRun.objects.filter(pk=never.pk).update(cancel_requested_at=now - timedelta(hours=1))

    found = transitions.terminating(now=now, fence=fence, limit=10)

    assert [run.pk for run in found] == [past.pk]
    assert status(past) == RunStatus.TERMINATING
    assert {status(r) for r in (young, threads, never)} == {RunStatus.RUNNING}
    # Its grace again later, it is still terminating: SIGKILL is due.
    assert transitions.still_terminating(now=now, after=timedelta(seconds=1), skip=set()) == []
    later = now + timedelta(seconds=5)
    assert [
        r.pk for r in transitions.still_terminating(now=later, after=timedelta(0), skip=set())
    ] == [past.pk]
    assert transitions.still_terminating(now=later, after=timedelta(0), skip={past.pk}) == []


def test_a_run_being_terminated_that_ends_by_itself_is_cancelled():
    run = running(make_job(cancel_grace=0))
    actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.TERMINATING)
    run.refresh_from_db()
    assert record(_delivery(), run, RunTimer(timezone.now()), Outcome(Ending.SUCCESS, 1)) == (
        RunStatus.CANCELLED
    )
    assert status(run) == RunStatus.CANCELLED
