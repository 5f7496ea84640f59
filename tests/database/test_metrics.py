"""Prometheus metrics in process: what the leader counts, the job label's cap, metrics off.

Real processes' /metrics, read back with the official client's own text parser:
tests/cluster/test_metrics_endpoints.py.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from prometheus_client import REGISTRY

from django_cluster_cron.ops import metrics
from django_cluster_cron.scheduler import build_scheduler
from django_cluster_cron.testing import NoWait
from tests.support.jobs import job_owing_one_slot

pytestmark = pytest.mark.django_db(transaction=True)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_leader_counts_ticks_slots_latency_and_shows_its_role(settings, redis_client):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}"}
    job_owing_one_slot("counted")
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
