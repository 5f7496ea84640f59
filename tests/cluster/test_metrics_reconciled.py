"""Every counter counts what its name says: a real scheduler and a real worker, their /metrics read
back with the official client's parser, each counter reconciled with the ledger it describes.

The jobs end a few seconds after the test starts (``end_at``), so the ledger stops growing and
every run reaches its fate; nothing is withdrawn (a paused job would delete runs recorded ahead,
which the leader rightly counted when it decided them).
"""

from __future__ import annotations

import re
import urllib.request
from datetime import timedelta

import pytest
from django.db.models import Sum
from prometheus_client.parser import text_string_to_metric_families

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.dispatch.celery import CeleryDispatcher
from django_cluster_cron.ledger.outbox import OutboxMessage
from django_cluster_cron.models import ACTIVE_STATUSES, JobDefinition, JobRun, RunStatus
from django_cluster_cron.worker.claim import duplicate_deliveries
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.any_database,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
# The leader's own words for a slot its overlap policy refused when it recorded it.
LEADER_SKIP = "overlap policy 'skip': the previous run is still waiting or running"


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def port_of(log: str) -> int:
    """The port a process logged it serves /metrics on (0 while it has not said)."""
    found = re.findall(r"metrics\.listening port=(\d+)", log)
    return int(found[-1]) if found else 0


def make(name: str, **fields):
    job = JobDefinition(name=name, timezone="UTC", **fields)
    job.full_clean()
    job.save()
    return job


def test_every_counter_agrees_with_the_ledger(cluster):
    # The late job owes its slots before anything starts; the others' seconds count from when
    # the worker and the leader are up (starting them on a loaded machine took longer than the
    # jobs' whole window, and the steady job then ran its latest slot only).
    owed = database_now()
    late = make(
        "late",
        cron="* * * * * *",
        task="tests.add",
        args=[3, 4],
        catchup_policy="latest",
        catchup_window=timedelta(minutes=1),
        end_at=owed + timedelta(seconds=3),
    )
    # The late job owes the slots of the last 30 s: the latest runs, the others are missed.
    JobDefinition.objects.filter(pk=late.pk).update(
        last_scheduled_at=owed - timedelta(seconds=30), next_run_at=owed - timedelta(seconds=29)
    )
    # Runs wait behind the skipper's long bodies on one worker; the outbox must not send copies
    # of them meanwhile on a slow machine (it would be right to, and the duplicates would be
    # counted: this test injects its own).
    cluster.settings.update(
        {
            "WORKER_METRICS_PORT": 0,
            "WORKER_METRICS_HOST": "127.0.0.1",
            "OUTBOX_REPUBLISH_AFTER": 600,
        }
    )
    cluster.worker("counted-worker")
    cluster.wait_ready("counted-worker")
    cluster.start("counted-leader", args=["--metrics-port", "0", "--health-host", "127.0.0.1"])
    leader_port = wait_for(lambda: port_of(cluster.log("counted-leader")), 60, "leader /metrics")
    worker_port = wait_for(lambda: port_of(cluster.log("counted-worker")), 60, "worker /metrics")

    now = database_now()
    end = now + timedelta(seconds=8)
    steady = make("steady", cron="* * * * * *", task="tests.add", args=[1, 2], end_at=end)
    failing = make(
        "failing",
        cron="* * * * * */2",
        task="tests.fail",
        max_retries=1,
        retry_backoff=0.2,
        retry_backoff_max=0.2,
        end_at=end,
    )
    skipper = make(
        "skipper",
        cron="* * * * * *",
        task="tests.sleep",
        args=[2.5],
        overlap_policy="skip",
        end_at=end,
    )
    jobs = [steady, failing, skipper, late]

    def settled() -> bool:
        past_end = JobDefinition.objects.filter(pk__in=[j.pk for j in jobs], next_run_at=None)
        return (
            past_end.count() == len(jobs)
            and JobRun.objects.exists()
            and not JobRun.objects.filter(status__in=ACTIVE_STATUSES).exists()
        )

    wait_for(settled, 120, "every job past its end and every run at its fate")

    # Three copies of finished runs' messages: the claim drops each, as a duplicate delivery.
    copies = list(JobRun.objects.filter(job=steady, status=RunStatus.SUCCESS)[:3])
    duplicates_before = duplicate_deliveries()
    copied = CeleryDispatcher().publish([OutboxMessage.for_run(run) for run in copies])
    assert len(copied) == 3, "the broker took every copy"
    wait_for(
        lambda: duplicate_deliveries() - duplicates_before == 3,
        60,
        "3 duplicates dropped",
        detail=lambda: (
            f"dropped: {duplicate_deliveries() - duplicates_before}\n"
            + "\n".join(cluster.log("counted-worker").splitlines()[-40:])
        ),
    )

    leader = scrape(leader_port)
    dropped = duplicate_deliveries()
    counted = wait_for(
        lambda: (
            found
            if value(found := scrape(worker_port), "cluster_cron_duplicate_deliveries_total")
            == dropped
            else None
        ),
        30,
        "the worker's count of duplicates to match the cluster's",
    )
    assert counted is not None
    worker: Samples = counted
    runs = JobRun.objects.filter(job__in=jobs)
    scheduled = runs.filter(trigger__in=("schedule", "catchup"))
    missed = runs.filter(status=RunStatus.MISSED)
    leader_skipped = runs.filter(status=RunStatus.SKIPPED, reason=LEADER_SKIP)
    started = runs.filter(started_at__isnull=False)

    # The leader: every slot it decided, by outcome, and each on-time slot's first send.
    assert value(leader, "cluster_cron_leader", node="counted-leader") == 1
    to_run = scheduled.count() - missed.count() - leader_skipped.count()
    assert missed.count() > 0
    assert leader_skipped.count() > 0
    assert to_run > 0
    assert (
        value(leader, "cluster_cron_slots_total", outcome="schedule")
        + value(leader, "cluster_cron_slots_total", outcome="catchup")
        == to_run
    )
    assert (
        value(leader, "cluster_cron_slots_total", outcome="catchup")
        == runs.filter(trigger="catchup").exclude(status=RunStatus.MISSED).count()
    )
    assert value(leader, "cluster_cron_slots_total", outcome="missed") == missed.count()
    assert value(leader, "cluster_cron_slots_total", outcome="skipped") == leader_skipped.count()
    sent_on_time = runs.filter(trigger="schedule", queued_at__isnull=False).count()
    assert value(leader, "cluster_cron_publish_latency_seconds_count") == sent_on_time
    assert value(leader, "cluster_cron_publish_failures_total") == 0
    assert value(leader, "cluster_cron_runs_lost_total", retried="true") == 0
    assert value(leader, "cluster_cron_runs_lost_total", retried="false") == 0

    # The worker: each claim, each fate, each retry; a body's every attempt timed, by job.
    attempts = sum(run.attempt for run in started)
    assert value(worker, "cluster_cron_runs_total", outcome="claimed") == attempts
    assert (
        value(worker, "cluster_cron_runs_total", outcome="succeeded")
        == runs.filter(status=RunStatus.SUCCESS).count()
    )
    assert (
        value(worker, "cluster_cron_runs_total", outcome="failed")
        == runs.filter(status=RunStatus.FAILED).count()
    )
    assert value(worker, "cluster_cron_runs_total", outcome="retried") == attempts - started.count()
    assert (
        value(worker, "cluster_cron_runs_total", outcome="skipped")
        == runs.filter(status=RunStatus.SKIPPED).exclude(reason=LEADER_SKIP).count()
    )
    for job in jobs:
        ran = sum(run.attempt for run in started.filter(job=job))
        timed = value(worker, "cluster_cron_run_duration_seconds_count", job_name=job.name)
        assert timed == ran, job.name
        last = runs.filter(job=job, status=RunStatus.SUCCESS).order_by("-finished_at").first()
        success_at = value(worker, "cluster_cron_last_success_timestamp_seconds", job_name=job.name)
        if last is None:
            assert success_at == 0, job.name
        else:
            assert last.finished_at is not None
            assert abs(success_at - last.finished_at.timestamp()) < 1, job.name
    assert value(worker, "cluster_cron_claim_seconds_count") == attempts

    # Every message that reached the broker: the leader's first sends and copies, the worker's
    # retries; publish_count counts each on its run.
    sent = runs.aggregate(total=Sum("publish_count"))["total"] or 0
    first_sends = runs.filter(publish_count__gte=1).count()
    assert sent == (
        first_sends
        + value(leader, "cluster_cron_outbox_republished_total")
        + value(worker, "cluster_cron_runs_total", outcome="retried")
    )
