"""The scheduler in process for the database tests: a controllable clock and real parts.

``make_scheduler`` (a fixture, registered in tests/database/conftest.py) builds schedulers on the
suite's Redis or the database lease (``lease_kind``), the real store and Celery publish, with a
clock the test moves. ``job`` makes a job whose slots up to a watermark are decided.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from django_cluster_cron.dispatch.celery import CeleryDispatcher
from django_cluster_cron.leases import LEADER
from django_cluster_cron.leases.database import DatabaseBackend
from django_cluster_cron.leases.redis import RedisBackend
from django_cluster_cron.models import JobDefinition
from django_cluster_cron.scheduler import Scheduler
from django_cluster_cron.scheduler.recording import Recorder
from django_cluster_cron.testing import NoWait
from tests.support.timing import WAIT, ttl_outlasting

UTC = timezone.utc
T0 = datetime(2030, 1, 1, 12, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def backend_of(kind: str):
    return RedisBackend() if kind == "redis" else DatabaseBackend()


@pytest.fixture
def make_scheduler(redis_client, settings, lease_kind):
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}",
        "LEASE_BACKEND": lease_kind,
    }
    backend = backend_of(lease_kind)
    made = []

    def make(
        node: str,
        clock: Clock,
        dispatcher=None,
        ttl: float = ttl_outlasting(calls=5),
        lookahead: float = 0.0,
    ) -> Scheduler:
        """A scheduler on ``clock``: it decides slots at their instant unless the test asks for
        a ``lookahead`` (test_lookahead.py tests recording ahead). Its lease holds across the
        test's steps unless the test asks for a ``ttl`` short enough to expire."""
        scheduler = Scheduler(
            node_id=node,
            lease=backend.lease(LEADER, node, ttl),
            backend=backend,
            recorder=Recorder(),
            dispatcher=dispatcher or CeleryDispatcher(),
            sleeper=NoWait(),
            clock=clock,
            poll_interval=0.1,
            lookahead=timedelta(seconds=lookahead),
        )
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        scheduler.shutdown()


def take_over(successor: Scheduler, timeout: float = WAIT) -> None:
    """Step ``successor`` until it leads: its predecessor vanished without a word (SIGKILL),
    so it waits for the predecessor's lease to expire."""
    from tests.support.waiting import wait_for

    def leads() -> bool:
        successor.step()
        return successor.is_leader

    wait_for(leads, timeout, "the predecessor's lease to expire and the successor to take over")


def job(name, cron="* * * * *", watermark=None, **fields):
    values = {"cron": cron, "timezone": "UTC", "task": "tests.add", "args": [1, 2]}
    values.update(fields)
    created = JobDefinition.objects.create(name=name, **values)
    if watermark is not None:
        schedule = created.schedule
        JobDefinition.objects.filter(pk=created.pk).update(
            last_scheduled_at=watermark, next_run_at=schedule.next_after(watermark)
        )
        created.refresh_from_db()
    return created


def queued_messages(redis_client, queue="celery"):
    return [json.loads(raw) for raw in redis_client.lrange(queue, 0, -1)]
