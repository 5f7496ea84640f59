"""Prometheus metrics: what the scheduler and the workers export, read back with the official
client's own text parser from real processes' /metrics."""

from __future__ import annotations

import re
import threading
import urllib.request
import uuid
from datetime import timedelta

import pytest
from django.db.models import F
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from django_cluster_cron.ops import metrics
from django_cluster_cron.scheduler import build_scheduler
from django_cluster_cron.testing import NoWait
from tests.support.cluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def due_job(name, **fields):
    job = JobDefinition(
        name=name, cron="* * * * *", timezone="UTC", task="tests.add", args=[1, 2], **fields
    )
    job.full_clean()
    job.save()
    # Owed one slot: the schedule as if it had started a minute earlier.
    JobDefinition.objects.filter(pk=job.pk).update(
        last_scheduled_at=F("last_scheduled_at") - timedelta(minutes=1),
        next_run_at=F("next_run_at") - timedelta(minutes=1),
    )
    return job


def test_the_leader_counts_ticks_slots_latency_and_shows_its_role(settings, redis_client):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}"}
    due_job("counted")
    before = {
        "ticks": sample("cluster_cron_ticks_total"),
        "slots": sample("cluster_cron_slots_total", outcome="schedule")
        + sample("cluster_cron_slots_total", outcome="catchup"),
        "latency": sample("cluster_cron_publish_latency_seconds_count"),
        "renewals": sample("cluster_cron_lease_renewals_total", result="ok"),
    }
    scheduler = build_scheduler(node_id="metered", sleeper=NoWait(), stop=threading.Event())
    try:
        scheduler.step()
        assert scheduler.is_leader
        assert sample("cluster_cron_leader", node="metered") == 1
        assert sample("cluster_cron_lease_epoch") == scheduler.epoch
        slots = sample("cluster_cron_slots_total", outcome="schedule") + sample(
            "cluster_cron_slots_total", outcome="catchup"
        )
        assert slots - before["slots"] == 1
        assert sample("cluster_cron_ticks_total") - before["ticks"] == 1
        assert REGISTRY.get_sample_value("cluster_cron_clock_offset_seconds", {"node": "metered"})
        scheduler.term.renew()
        assert sample("cluster_cron_lease_renewals_total", result="ok") - before["renewals"] == 1
    finally:
        scheduler.shutdown()
    assert sample("cluster_cron_leader", node="metered") == 0


def test_the_job_label_is_capped(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "METRICS_JOB_LABEL_LIMIT": 2}
    found = metrics.Metrics.__new__(metrics.Metrics)
    found._jobs, found._jobs_lock = set(), threading.Lock()
    assert [found.job_label(n) for n in ("a", "b", "c", "a")] == ["a", "b", metrics.OTHER_JOBS, "a"]
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "METRICS_JOB_LABEL_LIMIT": 0}
    assert found.job_label("a") == metrics.OTHER_JOBS


def test_metrics_off_is_a_no_op_everywhere(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "METRICS": False}
    assert metrics.get() is metrics.NULL
    metrics.get().runs.labels(outcome="claimed").inc()  # does nothing, raises nothing


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_run_scheduler_serves_its_metrics(cluster):
    due_job("scraped")
    cluster.start("scraped-node", args=["--metrics-port", "0", "--health-host", "127.0.0.1"])
    port = int(
        wait_for(
            lambda: re.findall(r"metrics.listening port=(\d+)", cluster.log("scraped-node")),
            30,
            "the metrics endpoint",
        )[0]
    )

    def leading_and_recorded():
        found = scrape(port)
        leads = found.get(("cluster_cron_leader", (("node", "scraped-node"),)))
        recorded = any(name == "cluster_cron_slots_total" for name, _labels in found)
        return found if leads and recorded else None

    found = wait_for(leading_and_recorded, 30, "the node to lead and record the due slot")
    names = {name for name, _labels in found}
    assert {
        "cluster_cron_leader",
        "cluster_cron_lease_epoch",
        "cluster_cron_ticks_total",
        "cluster_cron_slots_total",
        "cluster_cron_publish_latency_seconds_bucket",
        "cluster_cron_clock_offset_seconds",
    } <= names
    recorded = sum(
        value
        for (name, labels), value in found.items()
        if name == "cluster_cron_slots_total" and dict(labels)["outcome"] in ("schedule", "catchup")
    )
    assert recorded >= 1


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_prefork_worker_adds_up_its_pool_processes(cluster, tmp_path):
    """Two pool processes run the bodies; the main process's /metrics counts them all."""
    cluster.settings.update({"WORKER_METRICS_PORT": 0})
    job = JobDefinition(name="pooled", cron="0 0 1 1 *", timezone="UTC", task="tests.whoami")
    job.full_clean()
    job.save()
    worker = cluster.worker("pool", concurrency=2, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    cluster.wait_ready("pool")
    port = int(
        wait_for(
            lambda: re.findall(r"metrics.listening port=(\d+)", cluster.log("pool")),
            30,
            "the worker's metrics endpoint",
        )[0]
    )
    from django_cluster_cron.dispatch.celery import CeleryDispatcher
    from django_cluster_cron.ledger.outbox import OutboxMessage

    runs = []
    first = job.next_run_at
    assert first is not None
    for i in range(20):
        slot = first - timedelta(days=i + 1)
        runs.append(
            JobRun.objects.create(
                job=job,
                scheduled_for=slot,
                task_id=job.task_id_for(slot),
                trigger=RunTrigger.MANUAL,
            )
        )
    CeleryDispatcher().publish([OutboxMessage.for_run(run) for run in runs])
    wait_for(
        lambda: JobRun.objects.filter(job=job, status=RunStatus.SUCCESS).count() == 20,
        60,
        "twenty runs to succeed",
    )
    workers = set(JobRun.objects.filter(job=job).values_list("worker", flat=True))
    assert len(workers) == 2, f"both pool processes should have run some: {workers}"
    found = scrape(port)
    assert found[("cluster_cron_runs_total", (("outcome", "claimed"),))] == 20
    assert found[("cluster_cron_runs_total", (("outcome", "succeeded"),))] == 20
    assert found[("cluster_cron_run_duration_seconds_count", (("job", "pooled"),))] == 20
    assert found[("cluster_cron_claim_seconds_count", ())] == 20
    assert worker.poll() is None
