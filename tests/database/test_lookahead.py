"""Runs recorded ahead of their time, their messages published at the instant (issue 18.1).

In process, on a controllable clock, with the real database, lease, Celery publish and broker
queue (as test_scheduler.py). What each test shows: the message is in the broker at its due
time and not a moment before; a job paused, edited, deleted or re-timed inside the look-ahead
never gets its stale run published; a leader that disappears hands its prepared runs to the
next through the rows, with the same task ids; the budget, the overlap policies that decide at
the instant, jitter, the outbox sweep and the idle tick.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from django_cluster_cron import actions
from django_cluster_cron.core.timing import jitter_offset
from django_cluster_cron.dbtime import database_now
from django_cluster_cron.dispatch.celery import CeleryDispatcher
from django_cluster_cron.leases import LEADER
from django_cluster_cron.ledger.outbox import stale_pending
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from tests.support.inprocess import T0, Clock, backend_of, job, queued_messages, take_over
from tests.support.leases import LEASES
from tests.support.querycount import count_queries

pytestmark = pytest.mark.django_db(transaction=True)

AHEAD = 45.0  # on the 2030 clock: each minutely job has one instant recorded ahead
NEAR_AHEAD = 75.0  # on the database's clock (near_now)


def sent_ids(redis_client, queue="celery") -> list[str]:
    return [m["headers"]["id"] for m in queued_messages(redis_client, queue)]


def minutely(name="minutely", t0=T0, **fields):
    """A ``* * * * *`` job whose slots up to t0 - 60 s are decided: its next is t0."""
    return job(name, watermark=t0 - timedelta(seconds=60), **fields)


def near_now() -> tuple[Clock, datetime]:
    """A clock at the database's now and the next minute, 10 to 60 s away from it.

    For tests where a job is saved: the save reads the database's clock (the withdrawal and a
    restarted schedule go by it), so the test's clock must be close to it, not in 2030.
    """
    now = database_now()
    t0 = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if t0 - now < timedelta(seconds=10):  # time for the test's steps before t0, even loaded
        # Real time must pass: the database's clock moves past that minute.
        time.sleep((t0 - now).total_seconds() + 0.01)
        return near_now()
    return Clock(now), t0


@pytest.mark.parametrize("lease_kind", LEASES)
def test_a_run_is_recorded_ahead_and_its_message_reaches_the_broker_at_its_instant(
    make_scheduler, redis_client
):
    clock = Clock(T0 - timedelta(seconds=30))
    tick = minutely()
    scheduler = make_scheduler("node-a", clock, lookahead=AHEAD)

    scheduler.step()
    run = JobRun.objects.get()
    assert (run.scheduled_for, run.due_at) == (T0, T0)
    assert (run.status, run.trigger, run.publish_count) == (
        RunStatus.PENDING,
        RunTrigger.SCHEDULE,
        0,
    )
    assert run.task_id == tick.task_id_for(T0)
    assert redis_client.llen("celery") == 0
    tick.refresh_from_db()
    assert tick.last_scheduled_at == T0
    assert tick.next_run_at == T0 + timedelta(minutes=1)
    assert scheduler.armed.count == 1

    clock.now = T0 - timedelta(seconds=1)
    delay = scheduler.step()
    assert 0.9 < delay <= 0.95  # woken just before the instant: checked, then sent at it
    clock.now = T0 - timedelta(milliseconds=1)
    delay = scheduler.step()  # checked and unpacked, but this clock does not reach T0
    assert redis_client.llen("celery") == 0
    assert scheduler.armed.count == 1
    assert delay == 0

    clock.now = T0
    scheduler.step()
    assert sent_ids(redis_client) == [run.task_id]
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert run.publish_count == 1
    assert scheduler.armed.count == 0  # the next minute is beyond the look-ahead
    clock.advance(16)
    scheduler.step()
    assert JobRun.objects.filter(job=tick, scheduled_for=T0 + timedelta(minutes=1)).exists()
    assert scheduler.armed.count == 1


def test_the_message_built_ahead_is_the_one_the_instant_would_have_sent(
    make_scheduler, redis_client
):
    """Same headers and properties (but the ids and kombu's per-message delivery tag) as a
    message recorded and published at the instant: a job of overlap policy ``skip`` is."""
    clock = Clock(T0 - timedelta(seconds=30))
    options = {"queue": "reports", "expires": 120, "soft_time_limit": 5}
    ahead = minutely("ahead", time_limit=9, **options)
    instant = minutely("instant", time_limit=9, overlap_policy="skip", **options)
    scheduler = make_scheduler("node-a", clock, lookahead=AHEAD)
    scheduler.step()
    assert list(JobRun.objects.values_list("job__name", flat=True)) == ["ahead"]
    clock.now = T0
    scheduler.step()
    by_job = {m["headers"]["cluster_cron_job"]: m for m in queued_messages(redis_client, "reports")}
    assert set(by_job) == {ahead.pk, instant.pk}

    def comparable(message):
        headers = {k: v for k, v in message["headers"].items() if not k.startswith("cluster_")}
        for varying in ("id", "root_id", "argsrepr"):
            headers.pop(varying)
        properties = dict(message["properties"])
        # ``expiration``, the relative TTL kombu derives from ``expires``, counts from when the
        # message was built (Redis keeps no per-message TTL; the absolute header decides).
        for varying in ("delivery_tag", "correlation_id", "expiration"):
            properties.pop(varying)
        return headers, properties, message["content-type"], message["content-encoding"]

    assert comparable(by_job[ahead.pk]) == comparable(by_job[instant.pk])
    assert by_job[ahead.pk]["headers"]["expires"] is not None  # slot + 120 s, in both


def pause(j):
    j.enabled = False
    j.save()


def retime(j):
    # Half an hour away from the next minute (a fixed minute would be the next one once an hour).
    j.cron = f"{(database_now().minute + 30) % 60} * * * *"
    j.save()


def reroute(j):
    j.queue = "elsewhere"
    j.save()


def soft_delete(j):
    j.deleted_at = j.updated_at
    j.save()


@pytest.mark.parametrize(
    "change",
    [pause, retime, reroute, soft_delete],
    ids=["paused", "re-timed", "edited-queue", "deleted"],
)
def test_a_job_changed_inside_the_look_ahead_never_gets_its_stale_run_published(
    make_scheduler, redis_client, change
):
    clock, t0 = near_now()
    changed = minutely("changed", t0)
    steady = minutely("steady", t0)
    scheduler = make_scheduler("node-a", clock, lookahead=NEAR_AHEAD)
    scheduler.step()
    stale = JobRun.objects.get(job=changed)
    assert scheduler.armed.count == 2

    change(JobDefinition.all_objects.get(pk=changed.pk))
    assert not JobRun.objects.filter(pk=stale.pk).exists()  # withdrawn with the change

    clock.now = t0
    scheduler.step()
    assert stale.task_id not in sent_ids(redis_client)  # the old routing's queue
    assert steady.task_id_for(t0) in sent_ids(redis_client)


def test_a_job_paused_by_its_failures_policy_loses_its_runs_recorded_ahead(
    make_scheduler, redis_client
):
    from django_cluster_cron.ledger import failures

    clock, t0 = near_now()
    fragile = minutely("fragile", t0, pause_after_failures=1)
    scheduler = make_scheduler("node-a", clock, lookahead=NEAR_AHEAD)
    scheduler.step()
    assert JobRun.objects.filter(job=fragile, scheduled_for=t0).exists()
    assert failures.note_failure(JobDefinition.objects.get(pk=fragile.pk))
    assert not JobRun.objects.filter(job=fragile).exists()
    clock.now = t0
    scheduler.step()
    assert redis_client.llen("celery") == 0


def test_an_edited_queue_sends_the_slot_to_its_new_queue_at_the_instant(
    make_scheduler, redis_client
):
    clock, t0 = near_now()
    moved = minutely("moved", t0)
    scheduler = make_scheduler("node-a", clock, lookahead=NEAR_AHEAD)
    scheduler.step()
    reroute(JobDefinition.objects.get(pk=moved.pk))
    moved.refresh_from_db()
    assert moved.last_scheduled_at < t0  # the watermark went back: t0 is owed again
    clock.advance(1)
    scheduler.step()  # records t0 again, under the new routing
    assert JobRun.objects.get(job=moved).scheduled_for == t0
    assert redis_client.llen("elsewhere") == 0
    clock.now = t0
    scheduler.step()
    assert sent_ids(redis_client, "elsewhere") == [moved.task_id_for(t0)]
    assert redis_client.llen("celery") == 0


def test_a_run_recorded_ahead_that_an_operator_cancelled_is_not_sent(make_scheduler, redis_client):
    clock = Clock(T0 - timedelta(seconds=30))
    minutely()
    scheduler = make_scheduler("node-a", clock, lookahead=AHEAD)
    scheduler.step()
    run = actions.cancel(JobRun.objects.get())
    clock.now = T0
    scheduler.step()
    assert redis_client.llen("celery") == 0
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED


@pytest.mark.parametrize("lease_kind", LEASES)
def test_a_leader_that_vanishes_hands_its_runs_recorded_ahead_to_the_next(
    make_scheduler, redis_client, lease_kind
):
    clock = Clock(T0 - timedelta(seconds=30))
    minutely("one")
    minutely("two")
    gone = make_scheduler("node-a", clock, lookahead=AHEAD, ttl=1.5)
    gone.step()
    recorded = set(JobRun.objects.values_list("task_id", flat=True))
    assert len(recorded) == 2
    assert gone.armed.count == 2
    # node-a stops without a word (SIGKILL): its lease expires, node-b takes over.
    successor = make_scheduler("node-b", clock, lookahead=AHEAD)
    take_over(successor)
    assert successor.armed.count == 2  # taken over from the rows
    assert redis_client.llen("celery") == 0  # and not sent early

    clock.now = T0
    successor.step()
    assert set(sent_ids(redis_client)) == recorded  # the same task ids
    at_t0 = JobRun.objects.filter(scheduled_for=T0)
    assert set(at_t0.values_list("status", flat=True)) == {RunStatus.QUEUED}
    # The ledger names the leader that sent them, not the one that recorded them.
    assert set(at_t0.values_list("dispatched_by", "epoch")) == {("node-b", successor.epoch)}
    # node-a wakes up at the instant with its own prepared copies: fenced and checked out.
    gone.term.renew_at = gone.term.valid_until = float("inf")
    gone.step()
    assert len(sent_ids(redis_client)) == 2
    assert not gone.is_leader


def test_a_budget_of_three_records_three_ahead_and_the_rest_at_the_instant(
    make_scheduler, redis_client, settings
):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LOOKAHEAD_RUNS": 3}
    clock = Clock(T0 - timedelta(seconds=30))
    jobs = [minutely(f"job-{i}") for i in range(5)]
    scheduler = make_scheduler("node-a", clock, lookahead=AHEAD)
    scheduler.step()
    assert JobRun.objects.count() == 3
    assert scheduler.armed.count == 3
    clock.now = T0
    scheduler.step()
    assert sorted(sent_ids(redis_client)) == sorted(j.task_id_for(T0) for j in jobs)


def test_a_job_whose_overlap_policy_decides_at_the_instant_is_not_recorded_ahead(
    make_scheduler, redis_client
):
    clock = Clock(T0 - timedelta(seconds=30))
    skipper = minutely("skipper", overlap_policy="skip")
    scheduler = make_scheduler("node-a", clock, lookahead=AHEAD)
    delay = scheduler.step()
    assert not JobRun.objects.exists()
    assert 0 < delay <= 30  # it looks again before the instant (jobs entering the look-ahead)
    clock.now = T0
    scheduler.step()
    assert sent_ids(redis_client) == [skipper.task_id_for(T0)]


def test_a_jittered_slot_is_sent_at_its_due_time_under_its_own_slot(make_scheduler, redis_client):
    clock = Clock(T0 - timedelta(seconds=5))
    spread = minutely("spread", jitter=40)
    offset = jitter_offset(spread.pk, T0, timedelta(seconds=40))
    # Every slot due by T0 - 10 s is decided; the next is T0, due at T0 + its offset.
    JobDefinition.objects.filter(pk=spread.pk).update(
        last_scheduled_at=T0 - timedelta(seconds=10), next_run_at=T0 + offset
    )
    scheduler = make_scheduler("node-a", clock, lookahead=AHEAD)
    scheduler.step()
    run = JobRun.objects.get(scheduled_for=T0)
    assert run.due_at == T0 + offset
    clock.now = T0 + offset - timedelta(milliseconds=1)
    scheduler.step()
    assert spread.task_id_for(T0) not in sent_ids(redis_client)
    clock.now = T0 + offset
    scheduler.step()
    assert spread.task_id_for(T0) in sent_ids(redis_client)


def test_the_outbox_sweep_never_sends_a_run_before_it_is_due(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "OUTBOX_REPUBLISH_AFTER": 0.01}
    ahead = minutely()
    run = JobRun.objects.create(
        job=ahead,
        scheduled_for=T0,
        due_at=T0,
        task_id=ahead.task_id_for(T0),
        trigger=RunTrigger.SCHEDULE,
    )
    sweep = stale_pending
    later = timedelta(seconds=0.01)
    assert sweep(now=T0 - timedelta(seconds=1), older_than=later, limit=10) == []
    assert sweep(now=T0, older_than=later, limit=10) == []  # due, but not yet overdue
    [message] = sweep(now=T0 + timedelta(seconds=1), older_than=later, limit=10)
    assert message.run_id == run.pk
    JobRun.objects.filter(pk=run.pk).update(
        status=RunStatus.QUEUED, publish_count=1, republish_at=T0 - timedelta(seconds=5)
    )
    assert sweep(now=T0 - timedelta(seconds=1), older_than=later, limit=10) == []


@pytest.mark.parametrize("lease_kind", LEASES)
def test_an_idle_tick_with_runs_recorded_ahead_is_still_one_query(make_scheduler):
    clock = Clock(T0 - timedelta(seconds=40))
    for i in range(20):
        minutely(f"idle-{i}")
    scheduler = make_scheduler("node-a", clock, lookahead=AHEAD)
    scheduler.step()
    assert scheduler.armed.count == 20
    clock.advance(1)
    with count_queries() as queries:
        delay = scheduler.step()
    assert len(queries) == 1, [sql for sql, _ in queries.queries]
    assert 0 < delay <= 39


def test_the_leader_that_led_before_keeps_no_prepared_run_after_losing_the_lease(
    make_scheduler, lease_kind
):
    clock = Clock(T0 - timedelta(seconds=30))
    minutely()
    scheduler = make_scheduler("node-a", clock, lookahead=AHEAD)
    scheduler.step()
    assert scheduler.armed.count == 1
    backend_of(lease_kind).lease(LEADER, "node-a", 1).release()  # not ours: no effect
    scheduler.lease.release()  # the lease is gone: the next renewal fails
    scheduler.term.renew_at = 0
    scheduler.step()
    assert not scheduler.is_leader
    assert scheduler.armed.count == 0


@pytest.mark.parametrize("lease_kind", LEASES)
@pytest.mark.parametrize(
    "fields",
    [
        {"cron": "@at 2030-01-01T12:00"},
        {"end_at": T0},
        {"max_runs": 1},
    ],
    ids=["one-off", "end_at", "max_runs"],
)
def test_a_job_whose_last_slot_was_recorded_ahead_is_not_brought_back_by_the_next_leader(
    make_scheduler, redis_client, fields, caplog
):
    """Its next run is empty because every slot it has is decided, not because it was parked
    for a problem: a new term leaves it alone, its watermark where it is (issue 44, item 6)."""
    clock = Clock(T0 - timedelta(seconds=30))
    last = minutely("last", **fields)
    gone = make_scheduler("node-a", clock, lookahead=AHEAD, ttl=1.5)
    gone.step()
    last.refresh_from_db()
    assert (last.last_scheduled_at, last.next_run_at) == (T0, None)
    successor = make_scheduler("node-b", clock, lookahead=AHEAD)
    take_over(successor)
    successor.step()
    assert "job.returned" not in caplog.text
    last.refresh_from_db()
    assert (last.last_scheduled_at, last.next_run_at) == (T0, None)
    clock.now = T0
    successor.step()
    assert sent_ids(redis_client) == [last.task_id_for(T0)]
    assert JobRun.objects.filter(job=last).count() == 1


class Switching(CeleryDispatcher):
    """A dispatcher whose message form the test sets (as the workers' answers would)."""

    form = False

    def own_task(self) -> bool:
        return self.form


@pytest.mark.parametrize(("before", "after"), [(False, True), (True, False)])
def test_runs_built_ahead_in_one_message_form_go_out_in_the_form_of_their_instant(
    make_scheduler, redis_client, before, after
):
    """The workers' answers changed the form between recording and the instant (the first
    worker of a new cluster answered; a worker of an earlier release appeared): the messages
    built ahead are built again, in the form of now (issue 44, item 3)."""
    clock = Clock(T0 - timedelta(seconds=30))
    tick = minutely()
    dispatcher = Switching()
    dispatcher.form = before
    scheduler = make_scheduler("node-a", clock, dispatcher=dispatcher, lookahead=AHEAD)
    scheduler.step()
    assert scheduler.armed.count == 1
    dispatcher.form = after
    clock.now = T0
    scheduler.step()
    [message] = queued_messages(redis_client)
    assert message["headers"]["id"] == tick.task_id_for(T0)
    expected = "tests.add" if after else "django_cluster_cron.execute_run"
    assert message["headers"]["task"] == expected
    assert JobRun.objects.get(job=tick).status == RunStatus.QUEUED
