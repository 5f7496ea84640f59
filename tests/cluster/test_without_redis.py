"""No Redis at all: the database lease, a RabbitMQ broker, real schedulers and a real worker.

The child processes get a Redis URL that refuses every connection (port 1), so anything that still
reached for Redis would fail; the broker is RabbitMQ on a vhost of this run's own.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_cluster_cron.models import JobRun, RunStatus
from tests.settings import REDIS_PLACEHOLDER_URL
from tests.support.cluster import assert_every_slot_once, every_second_job
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def lease_kind() -> str:
    return "database"


def test_schedulers_and_a_worker_run_every_slot_once_with_no_redis(cluster, rabbitmq_url):
    cluster.env["REDIS_URL"] = REDIS_PLACEHOLDER_URL
    cluster.env["CELERY_BROKER_URL"] = rabbitmq_url
    job = every_second_job("no-redis")
    cluster.worker("w1")
    cluster.wait_ready("w1")
    cluster.start("a")
    cluster.start("b")
    wait_for(
        lambda: JobRun.objects.filter(job=job, status=RunStatus.SUCCESS).count() >= 3,
        60,
        "three runs to succeed through RabbitMQ",
    )
    first = "a" if JobRun.objects.filter(job=job, dispatched_by="a").exists() else "b"
    cluster.procs[first].kill()  # the standby takes over through the database lease
    killed_at = timezone.now()
    other = "b" if first == "a" else "a"
    wait_for(
        lambda: JobRun.objects.filter(job=job, dispatched_by=other).exists(),
        20,
        "the standby to take over",
    )
    # The new leader's first pass caught up the gap; two slots due after the kill, sent, show it
    # leading on.
    wait_for(
        lambda: (
            JobRun.objects.filter(
                job=job, dispatched_by=other, queued_at__isnull=False, scheduled_for__gt=killed_at
            ).count()
            >= 2
        ),
        30,
        "the standby to send two slots due after the kill",
    )
    job.refresh_from_db()
    job.pause()  # the ledger stops growing; every recorded run can finish
    wait_for(
        lambda: (
            not JobRun.objects.filter(
                job=job, status__in=[RunStatus.PENDING, RunStatus.QUEUED, RunStatus.RUNNING]
            ).exists()
        ),
        60,
        "every run to finish",
    )
    assert_every_slot_once(job)
    assert not JobRun.objects.filter(job=job).exclude(status=RunStatus.SUCCESS).exists()
    for name in ("a", "b"):
        log = cluster.log(name)
        assert "lease=database" in log, log
        assert "redis" not in log.lower(), log
