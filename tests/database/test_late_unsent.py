"""A run recorded ahead of its instant that nobody sent at its time goes by its job's catch-up
policy, wherever it is found late (issue 44, item 1).

Every scheduler stops inside the look-ahead (a deploy just before 09:00) and the next leader
comes long after the instant: it takes the run over from the rows, and the job's policy decides —
``none`` records it missed, ``latest`` keeps only the newest slot, ``all`` sends it as a
catch-up run. A worker that receives such a run's message late (deferred on a backend while no
scheduler ran) judges it the same way. In process, on the real database, lease and broker: the
leaders on a clock the test moves (as test_lookahead.py), the worker's claim on the database's
own clock. With real processes: tests/cluster/test_late_unsent_processes.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.conf import settings as django_settings

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.ledger.outbox import OutboxMessage
from django_cluster_cron.models import JobRun, RunStatus, RunTrigger
from tests.support.inprocess import T0, Clock, job, queued_messages, take_over
from tests.support.jobs import FORM, apply
from tests.support.leases import LEASES
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

AHEAD = 45.0
MINUTE = timedelta(minutes=1)


def sent_slots(redis_client, tick) -> dict[datetime, str]:
    """The slots of ``tick`` whose messages are in the broker, with the trigger each says."""
    by_id = {tick.task_id_for(T0 + k * MINUTE): T0 + k * MINUTE for k in range(-5, 30)}
    found = {}
    for message in queued_messages(redis_client):
        slot = by_id.get(message["headers"]["id"])
        if slot is not None:
            found[slot] = JobRun.objects.get(job=tick, scheduled_for=slot).trigger
    return found


def stop_everyone_then_lead_at(make_scheduler, clock, later: timedelta):
    """A leader records T0 ahead and vanishes before it; the next leads at T0 + ``later``."""
    gone = make_scheduler("node-a", clock, lookahead=AHEAD, ttl=1.5)
    gone.step()
    assert gone.armed.count == 1
    run = JobRun.objects.get(scheduled_for=T0)
    assert (run.status, run.publish_count) == (RunStatus.PENDING, 0)
    clock.now = T0 + later
    successor = make_scheduler("node-b", clock, lookahead=AHEAD)
    take_over(successor)
    successor.step()
    return run


@pytest.mark.parametrize("lease_kind", LEASES)
def test_none_a_run_recorded_ahead_found_ten_minutes_late_is_missed(
    make_scheduler, redis_client, caplog
):
    clock = Clock(T0 - timedelta(seconds=30))
    tick = job("reminder", watermark=T0 - MINUTE, catchup_policy="none")
    run = stop_everyone_then_lead_at(make_scheduler, clock, timedelta(minutes=10, seconds=5))
    run.refresh_from_db()
    assert run.status == RunStatus.MISSED
    assert run.reason.startswith("not sent at its time (found 605 s late)")
    assert "catch-up 'none' runs only slots under 60 s late" in run.reason
    # Only the slot on time when the leader came back goes out.
    assert sent_slots(redis_client, tick) == {T0 + 10 * MINUTE: RunTrigger.SCHEDULE}
    assert "runs.found_late missed=1 caught_up=0" in caplog.text


@pytest.mark.parametrize("lease_kind", LEASES)
def test_latest_runs_once_after_a_ten_minute_stop_the_newest_slot(make_scheduler, redis_client):
    clock = Clock(T0 - timedelta(seconds=30))
    tick = job("sync", watermark=T0 - MINUTE, catchup_policy="latest")
    run = stop_everyone_then_lead_at(make_scheduler, clock, timedelta(minutes=10, seconds=5))
    run.refresh_from_db()
    assert run.status == RunStatus.MISSED
    assert "catch-up 'latest' runs only the newest late slot" in run.reason
    assert sent_slots(redis_client, tick) == {T0 + 10 * MINUTE: RunTrigger.SCHEDULE}


@pytest.mark.parametrize("lease_kind", LEASES)
def test_latest_sends_the_stale_run_as_a_catch_up_when_it_is_still_the_newest_slot(
    make_scheduler, redis_client
):
    clock = Clock(T0 - timedelta(seconds=30))
    tick = job("sync", cron="*/5 * * * *", watermark=T0 - 5 * MINUTE, catchup_policy="latest")
    run = stop_everyone_then_lead_at(make_scheduler, clock, timedelta(minutes=2))
    run.refresh_from_db()
    assert (run.status, run.trigger) == (RunStatus.QUEUED, RunTrigger.CATCHUP)
    assert list(sent_slots(redis_client, tick)) == [T0]


@pytest.mark.parametrize("lease_kind", LEASES)
def test_all_sends_the_stale_run_as_a_catch_up_and_every_later_slot(make_scheduler, redis_client):
    clock = Clock(T0 - timedelta(seconds=30))
    tick = job("report", watermark=T0 - MINUTE, catchup_policy="all")
    run = stop_everyone_then_lead_at(make_scheduler, clock, timedelta(minutes=3, seconds=5))
    run.refresh_from_db()
    assert (run.status, run.trigger) == (RunStatus.QUEUED, RunTrigger.CATCHUP)
    assert sent_slots(redis_client, tick) == {
        T0: RunTrigger.CATCHUP,
        T0 + MINUTE: RunTrigger.CATCHUP,
        T0 + 2 * MINUTE: RunTrigger.CATCHUP,
        T0 + 3 * MINUTE: RunTrigger.SCHEDULE,
    }


@pytest.mark.parametrize("lease_kind", LEASES)
def test_a_stop_shorter_than_the_grace_sends_the_run_on_time(make_scheduler, redis_client):
    clock = Clock(T0 - timedelta(seconds=30))
    tick = job("reminder", watermark=T0 - MINUTE, catchup_policy="none")
    stop_everyone_then_lead_at(make_scheduler, clock, timedelta(seconds=20))
    assert sent_slots(redis_client, tick) == {T0: RunTrigger.SCHEDULE}


@pytest.mark.parametrize("lease_kind", LEASES)
def test_past_the_catch_up_window_the_run_is_missed_whatever_the_policy(
    make_scheduler, redis_client
):
    clock = Clock(T0 - timedelta(seconds=30))
    tick = job("report", watermark=T0 - MINUTE, catchup_policy="all", catchup_window=5 * MINUTE)
    run = stop_everyone_then_lead_at(make_scheduler, clock, timedelta(minutes=7, seconds=5))
    run.refresh_from_db()
    assert run.status == RunStatus.MISSED
    assert "outside the job's catch-up window (0:05:00)" in run.reason
    assert T0 not in sent_slots(redis_client, tick)


def test_the_outbox_sweep_judges_a_run_it_finds_unsent_and_late(make_scheduler, redis_client):
    """A leader that lives through the instant but could not send (the broker was down, say)
    finds the run in its outbox sweep: late, it goes by the policy like any late slot."""
    from django_cluster_cron.scheduler.publishing import Publisher

    clock = Clock(T0 - timedelta(seconds=30))
    tick = job("reminder", watermark=T0 - MINUTE, catchup_policy="none")
    scheduler = make_scheduler("node-a", clock, lookahead=AHEAD)
    scheduler.step()
    scheduler.armed.clear()  # its message never went out
    clock.now = T0 + 2 * MINUTE
    assert isinstance(scheduler.publisher, Publisher)
    scheduler.sweeps.republish_stale()
    run = JobRun.objects.get(job=tick, scheduled_for=T0)
    assert run.status == RunStatus.MISSED
    assert T0 not in sent_slots(redis_client, tick)


# -- the worker: a deferred message received late ------------------------------------------


def late_run(
    policy: str, late: timedelta, cron: str = "*/5 * * * *", task: str = "tests.record", name=""
):
    """A run recorded for a slot ``late`` before the database's now, never sent (its message
    deferred on a backend while no scheduler ran): what a worker receives late."""
    now = database_now()
    label = f"late-{policy}"
    tick = job(label + name, cron=cron, catchup_policy=policy, task=task, args=[label, 0])
    slot = (now - late).replace(microsecond=0)
    return JobRun.objects.create(
        job=tick,
        scheduled_for=slot,
        due_at=slot,
        task_id=tick.task_id_for(slot),
        trigger=RunTrigger.SCHEDULE,
        status=RunStatus.PENDING,
    )


@pytest.fixture(params=["task", "execute_run"])
def message_form(request):
    """Each worker test delivers the run's message in both forms: the job's own task and
    ``execute_run`` (what the leader sends while older workers may be up)."""
    FORM["current"] = request.param
    yield request.param
    FORM["current"] = "task"


def deliver(run) -> None:
    apply(run)


@pytest.mark.usefixtures("message_form")
def test_a_worker_that_receives_a_none_jobs_run_late_records_it_missed_without_running_it():
    run = late_run("none", timedelta(minutes=2))
    deliver(run)
    run.refresh_from_db()
    assert run.status == RunStatus.MISSED
    assert run.reason.startswith("not sent at its time (found 12")
    assert run.started_at is None
    assert not Execution.objects.filter(label="late-none").exists()


@pytest.mark.usefixtures("message_form")
def test_a_worker_runs_a_late_all_jobs_run_as_a_catch_up():
    run = late_run("all", timedelta(minutes=2))
    deliver(run)
    run.refresh_from_db()
    assert (run.status, run.trigger) == (RunStatus.SUCCESS, RunTrigger.CATCHUP)
    assert Execution.objects.filter(label="late-all").count() == 1


@pytest.mark.usefixtures("message_form")
def test_a_worker_runs_a_late_latest_run_only_while_no_later_slot_is_due():
    newest = late_run("latest", timedelta(seconds=90), cron="0 0 1 1 *")
    deliver(newest)
    newest.refresh_from_db()
    assert (newest.status, newest.trigger) == (RunStatus.SUCCESS, RunTrigger.CATCHUP)
    Execution.objects.all().delete()
    stale = late_run("latest", timedelta(minutes=7), cron="* * * * *", name="-stale")
    deliver(stale)
    stale.refresh_from_db()
    assert stale.status == RunStatus.MISSED
    assert "catch-up 'latest' runs only the newest late slot" in stale.reason
    assert not Execution.objects.exists()


@pytest.mark.usefixtures("message_form")
def test_a_run_a_leader_sent_on_time_runs_however_long_it_waited_in_the_queue():
    """A backlog is not an outage: the leader recorded the run sent at its instant."""
    run = late_run("none", timedelta(minutes=2))
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.QUEUED, publish_count=1)
    deliver(run)
    run.refresh_from_db()
    assert (run.status, run.trigger) == (RunStatus.SUCCESS, RunTrigger.SCHEDULE)


@pytest.mark.skipif(not django_settings.HAS_DJANGO_TASKS, reason="django-tasks is not installed")
def test_a_django_tasks_worker_judges_a_deferred_run_it_receives_late():
    from django_cluster_cron.djtasks import NOT_RUN, deliver_here

    run = late_run("none", timedelta(minutes=2), task="tests.testapp.dtasks.record")
    result = deliver_here(
        OutboxMessage.for_run(JobRun.objects.select_related("job").get(pk=run.pk))
    )
    run.refresh_from_db()
    assert run.status == RunStatus.MISSED
    assert NOT_RUN in result.return_value
    assert not Execution.objects.filter(label="late-none").exists()
