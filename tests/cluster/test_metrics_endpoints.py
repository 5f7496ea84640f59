"""Prometheus metrics from real processes: a `run_scheduler` node's and a prefork Celery
worker's /metrics, read back with the official client's own text parser. Each exports its own
series only, and a worker's values reach its /metrics whatever imported prometheus_client
before the worker chose its multiprocess directory (Flower's Celery plugin does).

What the leader counts in process is tests/database/test_metrics.py.
"""

from __future__ import annotations

import re
import urllib.request
from datetime import timedelta
from importlib.metadata import entry_points

import pytest
from prometheus_client.parser import text_string_to_metric_families

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from tests.support.jobs import job_owing_one_slot
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.any_database, pytest.mark.django_db(transaction=True)]


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


# Each role's families (prometheus_client's names, without a counter's ``_total``): the other
# role's /metrics must not list them, not even as zeros a dashboard would read as "nothing".
SCHEDULER_FAMILIES = {
    "cluster_cron_leader",
    "cluster_cron_lease_epoch",
    "cluster_cron_lease_renewals",
    "cluster_cron_ticks",
    "cluster_cron_slots",
    "cluster_cron_publish_latency_seconds",
    "cluster_cron_publish_failures",
    "cluster_cron_outbox_republished",
    "cluster_cron_runs_lost",
    "cluster_cron_oldest_pending_run_age_seconds",
    "cluster_cron_runs_recorded_ahead",
    "cluster_cron_clock_offset_seconds",
}
WORKER_FAMILIES = {
    "cluster_cron_runs",
    "cluster_cron_duplicate_deliveries",
    "cluster_cron_run_duration_seconds",
    "cluster_cron_last_success_timestamp_seconds",
    "cluster_cron_claim_seconds",
}


def families(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {family.name for family in text_string_to_metric_families(text)}


def listening_port(cluster, name: str) -> int:
    return int(
        wait_for(
            lambda: re.findall(r"metrics.listening port=(\d+)", cluster.log(name)),
            30,
            f"the metrics endpoint of {name}",
        )[0]
    )


@pytest.mark.timeout(120)
def test_run_scheduler_serves_its_metrics(cluster):
    job_owing_one_slot("scraped")
    cluster.start("scraped-node", args=["--metrics-port", "0", "--health-host", "127.0.0.1"])
    port = listening_port(cluster, "scraped-node")

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
    # The scheduler's own series only: no worker family, not even at zero.
    assert families(port) & WORKER_FAMILIES == set()


@pytest.mark.timeout(180)
def test_a_prefork_worker_adds_up_its_pool_processes(cluster, tmp_path):
    """Two pool processes run the bodies; the main process's /metrics counts them all."""
    cluster.settings.update({"WORKER_METRICS_PORT": 0})
    # Bodies of 0.2 s: one pool process cannot run all twenty while the other is briefly stalled.
    job = JobDefinition(
        name="pooled", cron="0 0 1 1 *", timezone="UTC", task="tests.sleep", args=[0.2]
    )
    job.full_clean()
    job.save()
    worker = cluster.worker("pool", concurrency=2, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    cluster.wait_ready("pool")
    port = listening_port(cluster, "pool")
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
    assert found[("cluster_cron_run_duration_seconds_count", (("job_name", "pooled"),))] == 20
    assert found[("cluster_cron_claim_seconds_count", ())] == 20
    assert worker.poll() is None
    # The worker's own series only: no scheduler family, not even at zero.
    assert families(port) & SCHEDULER_FAMILIES == set()


@pytest.mark.timeout(180)
def test_a_worker_exports_its_values_when_flower_imported_prometheus_client_first(cluster):
    """With Flower installed, Celery's command line loads Flower's plugin, which imports
    prometheus_client before the worker makes its multiprocess directory; the pool processes'
    values must still reach the main process's /metrics (they came out as an empty page)."""
    plugins = {plugin.name for plugin in entry_points(group="celery.commands")}
    assert "flower" in plugins, "the test extra installs Flower, whose plugin Celery loads"
    cluster.env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # the worker makes its own
    cluster.settings.update({"WORKER_METRICS_PORT": 0})
    job = JobDefinition(name="flowered", cron="0 0 1 1 *", timezone="UTC", task="tests.add")
    job.args = [1, 2]
    job.full_clean()
    job.save()
    worker = cluster.worker("flowered", concurrency=2)
    cluster.wait_ready("flowered")
    port = listening_port(cluster, "flowered")
    from django_cluster_cron.dispatch.celery import CeleryDispatcher
    from django_cluster_cron.ledger.outbox import OutboxMessage

    first = job.next_run_at
    assert first is not None
    runs = [
        JobRun.objects.create(
            job=job,
            scheduled_for=first - timedelta(days=i + 1),
            task_id=job.task_id_for(first - timedelta(days=i + 1)),
            trigger=RunTrigger.MANUAL,
        )
        for i in range(3)
    ]
    CeleryDispatcher().publish([OutboxMessage.for_run(run) for run in runs])
    wait_for(
        lambda: JobRun.objects.filter(job=job, status=RunStatus.SUCCESS).count() == 3,
        60,
        "three runs to succeed",
    )
    found = scrape(port)
    assert found.get(("cluster_cron_runs_total", (("outcome", "succeeded"),))) == 3, found
    assert found[("cluster_cron_run_duration_seconds_count", (("job_name", "flowered"),))] == 3
    assert worker.poll() is None
