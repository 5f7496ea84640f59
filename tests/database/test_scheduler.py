"""The scheduler in-process against the real database, Redis and broker (Redis transport).

A controllable clock drives planning; the lease, the store, the Celery publish and the broker
queue are real. Multi-process behaviour (failover, pauses, crashes) is in
test_scheduler_processes.py.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone as dj_timezone

from django_cluster_cron.coordination import coordination_for
from django_cluster_cron.dispatch.celery import CeleryDispatcher
from django_cluster_cron.leases import LEADER
from django_cluster_cron.ledger.fence import Fence
from django_cluster_cron.ledger.outbox import OutboxMessage, mark_published
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from tests.support.inprocess import T0, Clock, backend_of, job, queued_messages
from tests.support.leases import LEASES
from tests.support.querycount import count_queries
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_leader_records_each_due_slot_once_and_publishes_it_with_its_task_id(
    make_scheduler, redis_client
):
    clock = Clock(T0 + timedelta(seconds=0.5))
    nightly = job("every-minute", watermark=T0 - timedelta(seconds=30))
    scheduler = make_scheduler("node-a", clock)

    scheduler.step()

    run = JobRun.objects.get()
    assert run.scheduled_for == T0
    assert run.status == RunStatus.QUEUED
    assert run.trigger == RunTrigger.SCHEDULE
    assert run.dispatched_by == "node-a"
    assert run.epoch == scheduler.epoch
    assert run.task_id == f"cron-{nightly.pk}-20300101T120000Z"
    [message] = queued_messages(redis_client)
    assert message["headers"]["id"] == run.task_id
    assert message["headers"]["task"] == nightly.task  # the job's own task, with its arguments
    assert message["headers"]["argsrepr"] == repr(nightly.args)
    assert message["headers"]["cluster_cron_job"] == nightly.pk
    nightly.refresh_from_db()
    assert nightly.next_run_at == T0 + timedelta(minutes=1)
    assert nightly.last_scheduled_at == clock.now

    scheduler.step()  # nothing new is due: nothing new is written or sent
    assert JobRun.objects.count() == 1


def test_what_celerys_tools_show_of_the_arguments_is_masked_and_the_task_gets_them_whole(
    make_scheduler, redis_client
):
    clock = Clock(T0 + timedelta(seconds=0.5))
    job("every-minute", watermark=T0 - timedelta(seconds=30), task="tests.echo",
        args=[{"token": "t0k"}], kwargs={"api_key": "sk_live", "region": "eu"})  # fmt: skip
    make_scheduler("node-a", clock).step()
    [message] = queued_messages(redis_client)
    headers = message["headers"]
    assert "sk_live" not in headers["kwargsrepr"]
    assert "t0k" not in headers["argsrepr"]
    assert "'region': 'eu'" in headers["kwargsrepr"]
    body = json.loads(base64.b64decode(message["body"]))
    assert body[0] == [{"token": "t0k"}]
    assert body[1] == {"api_key": "sk_live", "region": "eu"}
    assert len(queued_messages(redis_client)) == 1


@pytest.mark.parametrize("lease_kind", LEASES)
def test_a_second_node_stands_by_while_the_first_leads(make_scheduler, redis_client):
    clock = Clock(T0 + timedelta(seconds=0.5))
    job("every-minute", watermark=T0 - timedelta(seconds=30))
    leader = make_scheduler("node-a", clock)
    standby = make_scheduler("node-b", clock)
    leader.step()
    standby.step()
    assert leader.is_leader
    assert not standby.is_leader
    assert JobRun.objects.filter(dispatched_by="node-b").count() == 0


@pytest.mark.parametrize(
    ("policy", "runs", "missed"),
    [("all", 10, 50), ("latest", 1, 59), ("none", 1, 59)],
)
def test_catch_up_after_an_outage_follows_the_policy(make_scheduler, policy, runs, missed):
    # Down for an hour; the window keeps the last 60 minutes; CATCHUP_CAP is 10 by default.
    clock = Clock(T0 + timedelta(seconds=1))
    job(
        f"catchup-{policy}",
        watermark=T0 - timedelta(hours=1),
        catchup_policy=policy,
        catchup_window=timedelta(minutes=60),
    )
    make_scheduler("node-a", clock).step()

    assert JobRun.objects.exclude(status=RunStatus.MISSED).count() == runs
    assert JobRun.objects.filter(status=RunStatus.MISSED).count() == missed
    latest = JobRun.objects.latest()
    assert latest.scheduled_for == T0
    assert latest.status == RunStatus.QUEUED  # the on-time slot runs under every policy
    if policy == "all":
        late = JobRun.objects.exclude(status=RunStatus.MISSED).exclude(scheduled_for=T0)
        assert {r.trigger for r in late} == {RunTrigger.CATCHUP}


def test_slots_outside_the_window_are_summarised_not_recorded(make_scheduler, caplog):
    clock = Clock(T0 + timedelta(seconds=1))
    job(
        "week-down",
        watermark=T0 - timedelta(days=7),
        catchup_policy="latest",
        catchup_window=timedelta(minutes=10),
    )
    with caplog.at_level(logging.WARNING, logger="django_cluster_cron.scheduler"):
        make_scheduler("node-a", clock).step()
    assert JobRun.objects.count() == 10  # slots in (now - 10 min, now]: T0-9min … T0
    assert (
        "were also missed (not recorded one by one)"
        in JobRun.objects.filter(status=RunStatus.MISSED).earliest().reason
    )
    assert "runs.missed_unrecorded" in caplog.text


def test_overlap_skip_records_a_skipped_run_while_the_previous_one_is_active(make_scheduler):
    clock = Clock(T0 + timedelta(seconds=1))
    skipper = job("skipper", watermark=T0 - timedelta(seconds=30), overlap_policy="skip")
    JobRun.objects.create(
        job=skipper,
        scheduled_for=T0 - timedelta(minutes=1),
        task_id="earlier",
        trigger=RunTrigger.SCHEDULE,
        status=RunStatus.RUNNING,
    )
    make_scheduler("node-a", clock).step()
    run = JobRun.objects.get(scheduled_for=T0)
    assert run.status == RunStatus.SKIPPED
    assert "overlap policy 'skip'" in run.reason


@pytest.mark.parametrize("lease_kind", LEASES)
def test_a_stale_leader_is_fenced_out_and_writes_nothing(make_scheduler, redis_client, lease_kind):
    clock = Clock(T0 + timedelta(seconds=1))
    old = make_scheduler("node-old", clock, ttl=1.5)  # its first step keeps it, however slow
    old.step()
    assert old.is_leader
    # It renewed just before it paused, so on waking it believes its lease is fresh...
    old.term.renew_at = old.term.valid_until = float("inf")
    # ...but its lease expired meanwhile and a newer leader took over.
    new = backend_of(lease_kind).lease(LEADER, "node-new", 5)
    wait_for(new.try_acquire, 15, "the stale leader's lease to expire")
    if lease_kind == "redis":
        Fence.claim("node-new", new.token)
    job("due-now", watermark=T0 - timedelta(seconds=30))

    old.step()

    assert not old.is_leader
    assert JobRun.objects.count() == 0
    assert redis_client.llen("celery") == 0


def test_a_job_with_bad_data_is_reported_once_and_the_others_keep_running(make_scheduler, caplog):
    clock = Clock(T0 + timedelta(seconds=1))
    good = job("good", watermark=T0 - timedelta(seconds=30))
    bad = job("bad", watermark=T0 - timedelta(seconds=30))
    with connection.cursor() as cursor:  # bad data that bypassed validation
        cursor.execute(
            f"UPDATE {JobDefinition._meta.db_table} SET cron = 'every tuesday' WHERE id = %s",
            [bad.pk],
        )
    scheduler = make_scheduler("node-a", clock)
    with caplog.at_level(logging.ERROR, logger="django_cluster_cron.scheduler"):
        scheduler.step()
        clock.advance(60)
        scheduler.step()
    assert JobRun.objects.filter(job=good).count() == 2
    assert JobRun.objects.filter(job=bad).count() == 0
    assert caplog.text.count("job.invalid") == 1
    bad.refresh_from_db()
    assert bad.next_run_at is None


@pytest.mark.parametrize("lease_kind", LEASES)
@pytest.mark.parametrize("jobs", [10, 300])
def test_an_idle_tick_costs_the_same_queries_whatever_the_number_of_jobs(make_scheduler, jobs):
    clock = Clock(T0)
    JobDefinition.objects.bulk_create(
        JobDefinition(
            name=f"idle-{i}",
            cron="0 0 1 1 *",
            timezone="UTC",
            task="tests.add",
            last_scheduled_at=T0,
            next_run_at=T0 + timedelta(days=30),
        )
        for i in range(jobs)
    )
    scheduler = make_scheduler("node-a", clock)
    scheduler.step()  # acquire, first outbox sweep
    clock.advance(1)
    with count_queries() as queries:  # Django's connection and the lease's own
        delay = scheduler.step()
    assert len(queries) == IDLE_TICK_QUERIES, [sql for sql, _ in queries.queries]
    assert delay > 0


# One query: the current epoch, the database's clock and the MIN(next_run_at) over the partial
# index that says nothing is due and how long to sleep.
IDLE_TICK_QUERIES = 1


def test_runs_stay_pending_while_the_broker_is_down_and_the_outbox_sends_them_later(
    make_scheduler, redis_client, settings
):
    from celery import Celery

    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "OUTBOX_REPUBLISH_AFTER": 0.01}
    clock = Clock(dj_timezone.now())
    dead = Celery("dead", broker="redis://127.0.0.1:1/0", set_as_current=False)
    dead.conf.broker_connection_timeout = 0.5
    job(
        "every-second",
        cron="* * * * * *",
        watermark=clock.now - timedelta(seconds=3),
        catchup_policy="all",
    )
    down = make_scheduler("node-a", clock, dispatcher=CeleryDispatcher(dead))
    down.step()
    pending = list(JobRun.objects.values_list("task_id", "status"))
    assert pending
    assert {status for _, status in pending} == {RunStatus.PENDING}
    assert redis_client.llen("celery") == 0
    down.shutdown()

    clock.advance(0.5)
    up = make_scheduler("node-b", clock)
    up.step()  # the new leader's first step sweeps the outbox
    queued = dict(JobRun.objects.values_list("task_id", "status"))
    for task_id, _ in pending:
        assert queued[task_id] == RunStatus.QUEUED
    sent = {m["headers"]["id"] for m in queued_messages(redis_client)}
    assert {task_id for task_id, _ in pending} <= sent


def test_a_leader_that_cannot_publish_gives_the_lease_up_and_leads_again_once_it_can(
    make_scheduler, redis_client, settings
):
    from celery import Celery

    clock = Clock(dj_timezone.now())
    dead = Celery("dead", broker="redis://127.0.0.1:1/0", set_as_current=False)
    dead.conf.broker_connection_timeout = 0.5
    job("every-second", cron="* * * * * *", catchup_policy="all")
    cut_off = make_scheduler("node-a", clock, dispatcher=CeleryDispatcher(dead))
    cut_off.step()
    assert cut_off.is_leader  # one failed publish is not yet a reason to go

    def stepped_down() -> bool:
        clock.advance(1)  # a new slot to publish each pass: fresh evidence
        cut_off.step()
        return not cut_off.is_leader

    wait_for(stepped_down, 30, "the leader giving the lease up after a second of failures")
    # While its broker stays out of reach it does not take the free lease again.
    for _ in range(3):
        cut_off.step()
        assert not cut_off.is_leader
    # A node that reaches the broker leads, and sends what the first one could not.
    healthy = make_scheduler("node-b", clock)
    healthy.step()
    assert healthy.is_leader
    pending = JobRun.objects.filter(status=RunStatus.PENDING, scheduled_for__lte=clock.now)
    wait_for(lambda: (healthy.step(), not pending.exists())[1], 30, "the pending runs sent")
    sent = {m["headers"]["id"] for m in queued_messages(redis_client)}
    assert set(JobRun.objects.values_list("task_id", flat=True)) <= sent


def change_backend(settings, kind):
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}",
        "LEASE_BACKEND": kind,
    }
    backend = backend_of(kind)
    if kind == "database" and connection.vendor != "postgresql":
        pytest.skip("only PostgreSQL has a change channel (LISTEN/NOTIFY); elsewhere they poll")
    return backend


@pytest.mark.parametrize("kind", LEASES)
def test_a_change_signal_wakes_a_sleeping_scheduler_early(settings, kind):
    changes = coordination_for(change_backend(settings, kind)).changes
    listener = changes.sleeper(poll_interval=60)
    stop = threading.Event()
    try:
        assert listener.wait(0.2, stop) is False  # subscribes; nothing published
        threading.Timer(0.2, changes.publish, args=["job:1"]).start()
        started = time.monotonic()
        assert listener.wait(10, stop) is True
        assert time.monotonic() - started < 5
    finally:
        listener.close()


@pytest.mark.parametrize("kind", LEASES)
def test_saving_a_job_publishes_a_change(settings, kind):
    changes = coordination_for(change_backend(settings, kind)).changes
    listener = changes.sleeper(poll_interval=60)
    stop = threading.Event()
    try:
        listener.wait(0.1, stop)
        job("saved")
        assert listener.wait(5, stop) is True
    finally:
        listener.close()


def test_without_a_change_channel_a_sleeper_wakes_each_poll_interval_to_look(settings):
    from django_cluster_cron.coordination.changes import PollingSleeper

    sleeper = PollingSleeper(poll_interval=0.2)
    started = time.monotonic()
    assert sleeper.wait(30, threading.Event()) is False
    assert 0.15 < time.monotonic() - started < 2


def test_a_queued_run_whose_message_the_broker_lost_is_sent_again_with_backoff(
    make_scheduler, redis_client, settings
):
    """Regression (chaos suite): a Redis restart without persistence emptied the broker queue
    and the runs stayed 'queued' forever."""
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "OUTBOX_REPUBLISH_AFTER": 0.2}
    # Real time (the queued run's republish time is the database's); an hourly job owing the
    # hour's slot alone, started at least 2 s before the next hour, so that the half second the
    # test moves on does not reach the next slot.
    now = dj_timezone.now()
    next_hour = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    if next_hour - now < timedelta(seconds=2):
        # Real time must pass: the database's clock moves past that hour.
        time.sleep((next_hour - now).total_seconds() + 0.01)
    clock = Clock(dj_timezone.now())
    hour = clock.now.replace(minute=0, second=0, microsecond=0)
    job("lost-in-broker", cron="0 * * * *", watermark=hour - timedelta(seconds=1))
    scheduler = make_scheduler("node-a", clock)
    scheduler.step()
    run = JobRun.objects.get()
    assert run.status == RunStatus.QUEUED
    assert run.publish_count == 1
    first_due = run.republish_at
    redis_client.delete("celery")  # the broker forgets its queue
    clock.advance(0.5)
    # Real time must pass: the republish wait (0.2 s on the database's clock), the sweep interval.
    time.sleep(0.3)
    scheduler.step()
    run.refresh_from_db()
    assert run.publish_count == 2
    assert run.status == RunStatus.QUEUED
    assert [m["headers"]["id"] for m in queued_messages(redis_client)] == [run.task_id]
    assert run.republish_at - clock.now > first_due - run.queued_at  # the wait doubled


def test_the_republish_wait_doubles_per_copy_but_is_capped(settings):

    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "OUTBOX_REPUBLISH_AFTER": 10}
    made = job("backoff")
    slot = T0
    run = JobRun.objects.create(
        job=made,
        scheduled_for=slot,
        task_id=made.task_id_for(slot),
        trigger=RunTrigger.SCHEDULE,
        status=RunStatus.QUEUED,
    )
    now = dj_timezone.now()
    waits = []
    for count in (0, 1, 2, 3, 4, 5, 20):
        JobRun.objects.filter(pk=run.pk).update(publish_count=count)
        run.refresh_from_db()
        mark_published([OutboxMessage.for_run(run)], now=now)
        run.refresh_from_db()
        waits.append((run.republish_at - now).total_seconds())
        assert run.publish_count == count + 1
    assert waits == [10, 20, 40, 80, 160, 160, 160]
