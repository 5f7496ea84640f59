"""The dispatcher's fast publish path against a real Redis broker, and the store's batch I/O.

The dispatcher builds and sends messages without ``app.send_task`` (see dispatch/celery/sender.py);
these tests hold it to sending what ``send_task`` sends, firing Celery's publish signals, and
counting as published only what reached the broker. A real worker running these messages is
covered by test_worker.py (``test_three_copies_to_two_workers_execute_the_body_once``) and
test_scheduler_processes.py.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery.signals import after_task_publish, before_task_publish

import django_cluster_cron.dispatch.celery as adapter
from django_cluster_cron.dispatch import PublishFailed
from django_cluster_cron.dispatch.celery import CeleryDispatcher, sender
from django_cluster_cron.dispatch.celery.sender import PUBLISH_RETRY_POLICY, routing_for
from django_cluster_cron.ledger.fence import Fence
from django_cluster_cron.ledger.outbox import OutboxMessage, mark_published, mark_sent
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from django_cluster_cron.scheduler.recording import Recorder
from django_cluster_cron.wire.celery import EXECUTE_TASK, headers_for
from tests.support.jobs import outbox_message

pytestmark = pytest.mark.django_db(transaction=True)
UTC = timezone.utc
# Differ between any two publishes: the broker's delivery tag; the TTL is relative to "now".
VOLATILE_PROPERTIES = {"delivery_tag", "expiration"}


def celery_app():
    from tests.testapp.celery import app

    return app


message = outbox_message


def raw_messages(redis_client, queue: str) -> list[dict[str, Any]]:
    """The queue's messages, oldest first (prioritised ones live in other keys)."""
    keys = [k for k in redis_client.scan_iter(match=f"{queue}*") if redis_client.type(k) == b"list"]
    return [json.loads(raw) for key in keys for raw in reversed(redis_client.lrange(key, 0, -1))]


def comparable(raw: dict[str, Any]) -> dict[str, Any]:
    properties = {k: v for k, v in raw["properties"].items() if k not in VOLATILE_PROPERTIES}
    return {**raw, "properties": properties}


def send_task_copy(app, msg: OutboxMessage) -> None:
    """What the dispatcher did before the fast path: one ``send_task`` per message."""
    with app.producer_or_acquire() as producer:
        app.send_task(
            EXECUTE_TASK,
            args=[msg.run_id, msg.attempt],
            task_id=msg.task_id,
            producer=producer,
            retry=True,
            retry_policy=PUBLISH_RETRY_POLICY,
            headers=headers_for(msg),
            **routing_for(msg),
        )


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {
            "queue": "reports",
            "priority": 3,
            "expires": timedelta(hours=1),  # from now, when the test runs
            "soft_time_limit": 30,
            "time_limit": 60,
            "trigger": "catchup",
        },
    ],
    ids=["defaults", "queue-priority-expiry-limits"],
)
def test_the_fast_path_sends_exactly_what_send_task_sends(redis_client, fields):
    app = celery_app()
    if "expires" in fields:
        fields = {**fields, "expires": datetime.now(UTC) + fields["expires"]}
    msg = message(**fields)
    queue = fields.get("queue", "celery")

    send_task_copy(app, msg)
    [reference] = raw_messages(redis_client, queue)
    redis_client.flushdb()
    assert CeleryDispatcher(app).publish([msg]) == [msg.task_id]
    [ours] = raw_messages(redis_client, queue)

    assert comparable(ours) == comparable(reference)
    assert ours["headers"]["id"] == msg.task_id
    assert ours["headers"]["argsrepr"] == f"[{msg.run_id}, 1]"
    if "expires" in fields:
        ttl_ms = float(ours["properties"]["expiration"])  # kombu sends the TTL in ms
        assert 3_500_000 < ttl_ms <= 3_600_000


def test_every_message_fires_celerys_publish_signals_in_order(redis_client):
    events: list[tuple[str, str, str]] = []

    def before(sender, headers, routing_key, **_):
        events.append(("before", sender, headers["id"]))

    def after(sender, headers, routing_key, **_):
        events.append(("after", sender, headers["id"]))

    before_task_publish.connect(before, weak=False)
    after_task_publish.connect(after, weak=False)
    try:
        batch = [message(n) for n in range(3)]
        CeleryDispatcher(celery_app()).publish(batch)
    finally:
        before_task_publish.disconnect(before)
        after_task_publish.disconnect(after)

    expected = []
    for msg in batch:
        expected += [("before", EXECUTE_TASK, msg.task_id), ("after", EXECUTE_TASK, msg.task_id)]
    assert events == expected
    sent = [m["headers"]["id"] for m in raw_messages(redis_client, "celery")]
    assert sent == [m.task_id for m in batch]


@pytest.mark.parametrize("pipeline", [True, False])
def test_a_failure_mid_batch_reports_exactly_what_reached_the_broker(
    redis_client, monkeypatch, pipeline
):
    monkeypatch.setattr(adapter, "PIPELINE_SIZE", 2)
    original = sender.BatchSender.send
    calls = []

    def failing_send(self, msg):
        calls.append(msg.task_id)
        if len(calls) == 4:
            raise ConnectionError("broker went away")
        original(self, msg)

    monkeypatch.setattr(sender.BatchSender, "send", failing_send)
    batch = [message(n) for n in range(5)]

    with pytest.raises(PublishFailed) as failed:
        CeleryDispatcher(celery_app(), pipeline=pipeline).publish(batch)

    # Chunks of 2; the second fails on its second message. Pipelined, that chunk is discarded
    # whole; sent one by one, its first message went out and counts.
    got_through = 2 if pipeline else 3
    assert failed.value.published == [m.task_id for m in batch[:got_through]]
    in_broker = [m["headers"]["id"] for m in raw_messages(redis_client, "celery")]
    assert in_broker == [m.task_id for m in batch[:got_through]]


def test_a_message_with_an_eta_still_goes_through_send_task(redis_client):
    eta = datetime.now(UTC) + timedelta(minutes=5)
    msg = message(eta=eta, attempt=2, trigger="retry")
    CeleryDispatcher(celery_app()).publish([msg])
    [sent] = raw_messages(redis_client, "celery")
    assert sent["headers"]["id"] == msg.task_id
    assert datetime.fromisoformat(sent["headers"]["eta"]) == eta


def test_if_celerys_internals_moved_every_message_goes_through_send_task(
    redis_client, monkeypatch, caplog
):
    def moved(self, app):
        raise AttributeError("'Celery' object has no attribute '_tasks'")

    monkeypatch.setattr(sender.BatchSender, "_prepare", moved)
    monkeypatch.setattr(sender, "_slow_path_reported", [])
    app = celery_app()
    sent_by_send_task = []
    real_send_task = app.send_task

    def counting_send_task(*args, **kwargs):
        sent_by_send_task.append(kwargs["task_id"])
        return real_send_task(*args, **kwargs)

    monkeypatch.setattr(app, "send_task", counting_send_task)
    first, second = [message(1), message(2)], [message(3)]

    with caplog.at_level("WARNING", logger="django_cluster_cron.scheduler"):
        assert CeleryDispatcher(app).publish(first) == [m.task_id for m in first]
        assert CeleryDispatcher(app).publish(second) == [second[0].task_id]

    assert sent_by_send_task == [m.task_id for m in first + second]
    in_broker = [m["headers"]["id"] for m in raw_messages(redis_client, "celery")]
    assert in_broker == sent_by_send_task
    slow = [r for r in caplog.records if r.getMessage().startswith("dispatch.slow_path")]
    assert len(slow) == 1, "logged once per process, not once per batch"


# -- the store ----------------------------------------------------------------------------------


def make_job(name: str, **fields) -> JobDefinition:
    values = {"cron": "* * * * *", "timezone": "UTC", "task": "tests.add", "args": [1, 2]}
    values.update(fields)
    job: JobDefinition = JobDefinition.objects.create(name=name, **values)
    watermark = datetime(2030, 1, 1, 11, 59, 30, tzinfo=UTC)
    JobDefinition.objects.filter(pk=job.pk).update(
        last_scheduled_at=watermark, next_run_at=datetime(2030, 1, 1, 12, tzinfo=UTC)
    )
    return job


def test_a_recorded_batch_yields_the_same_messages_as_its_rows():
    from django_cluster_cron.models import SchedulerLease

    SchedulerLease.objects.create(name="leader", epoch=5)
    make_job("plain")
    make_job("routed", queue="reports", priority=4, expires=90, soft_time_limit=5, time_limit=9)
    now = datetime(2030, 1, 1, 12, 0, 1, tzinfo=UTC)

    batch = Recorder().schedule_due(now=now, fence=Fence(5), node_id="n", limit=10)

    runs = JobRun.objects.select_related("job").order_by("scheduled_for", "pk")
    assert batch.messages == [OutboxMessage.for_run(run) for run in runs]
    assert {m.queue for m in batch.messages} == {None, "reports"}


def test_mark_published_queues_pending_runs_and_leaves_other_waiting_statuses():
    from django_cluster_cron.models import SchedulerLease

    SchedulerLease.objects.create(name="leader", epoch=1)
    job = make_job("j")
    slot = datetime(2030, 1, 1, 12, tzinfo=UTC)
    earlier = slot - timedelta(hours=1)
    pending = JobRun.objects.create(job=job, scheduled_for=slot, task_id="p", trigger="schedule")
    retrying = JobRun.objects.create(
        job=job,
        scheduled_for=slot + timedelta(minutes=1),
        task_id="r",
        trigger="schedule",
        status=RunStatus.RETRYING,
        attempt=2,
        publish_count=1,
        queued_at=earlier,
    )
    now = slot + timedelta(seconds=1)
    messages = [OutboxMessage.for_run(JobRun.objects.get(pk=r.pk)) for r in (pending, retrying)]

    mark_published(messages, now=now, fence=Fence(1))

    pending.refresh_from_db()
    retrying.refresh_from_db()
    assert (pending.status, pending.queued_at, pending.publish_count) == ("queued", now, 1)
    assert (retrying.status, retrying.queued_at, retrying.publish_count) == (
        "retrying",
        earlier,
        2,
    )
    assert pending.republish_at is not None
    assert retrying.republish_at is not None
    assert retrying.republish_at - now == 2 * (pending.republish_at - now)


def test_a_first_send_recorded_after_a_workers_retry_send_erases_neither():
    """The leader records the sends of runs recorded ahead at the end of its pass; a fast worker
    may have claimed the run, failed it and sent its retry before that. Both sends count (the
    reconciliation of metrics with the ledger found the first one overwriting the second)."""
    from django_cluster_cron.models import SchedulerLease

    SchedulerLease.objects.create(name="leader", epoch=1)
    job = make_job("raced")
    slot = datetime(2030, 1, 1, 12, tzinfo=UTC)
    run = JobRun.objects.create(
        job=job, scheduled_for=slot, due_at=slot, task_id="raced", trigger="schedule"
    )
    claimed = JobRun.objects.select_related("job").get(pk=run.pk)  # publish_count 0 still
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.RETRYING, attempt=2)
    retry_at = slot + timedelta(seconds=10)
    mark_published(
        [OutboxMessage.for_run(claimed)], now=slot + timedelta(seconds=1), not_before=retry_at
    )
    mark_sent([([run.pk], slot)], fence=Fence(1), node_id="leader-node")

    run.refresh_from_db()
    assert run.publish_count == 2
    assert run.status == RunStatus.RETRYING


def test_the_fast_path_sends_the_jobs_own_task_exactly_as_send_task_would(redis_client):
    app = celery_app()
    msg = message(task="tests.echo", args=(1, "two"), kwargs={"three": [3]}, queue="reports")
    with app.producer_or_acquire() as producer:
        app.send_task(
            "tests.echo",
            args=[1, "two"],
            kwargs={"three": [3]},
            task_id=msg.task_id,
            producer=producer,
            retry=True,
            retry_policy=PUBLISH_RETRY_POLICY,
            headers=headers_for(msg),
            **routing_for(msg),
        )
    [reference] = raw_messages(redis_client, "reports")
    redis_client.flushdb()
    assert CeleryDispatcher(app, own_task=True).publish([msg]) == [msg.task_id]
    [ours] = raw_messages(redis_client, "reports")
    assert comparable(ours) == comparable(reference)
    assert ours["headers"]["task"] == "tests.echo"
    assert ours["headers"]["cluster_cron_run"] == msg.run_id


def test_the_jobs_options_win_over_its_tasks_and_the_tasks_apply_where_the_job_sets_none(
    redis_client,
):
    app = celery_app()
    plain = message(1, task="tests.limited", args=(5,))
    CeleryDispatcher(app, own_task=True).publish([plain])
    [sent] = raw_messages(redis_client, "celery")
    assert sent["headers"]["task"] == "tests.limited"
    assert sent["headers"]["timelimit"] == [30, 20]  # the task's own limits
    redis_client.flushdb()
    own = message(2, task="tests.limited", args=(5,), queue="jobs", time_limit=8, soft_time_limit=4)
    CeleryDispatcher(app, own_task=True).publish([own])
    [sent] = raw_messages(redis_client, "jobs")
    assert sent["headers"]["timelimit"] == [8, 4]
