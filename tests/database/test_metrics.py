"""Prometheus metrics in process: what the leader counts, the job label's cap, metrics off.

Real processes' /metrics, read back with the official client's own text parser:
tests/cluster/test_metrics_endpoints.py.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

from django_cluster_cron.models import JobRun
from django_cluster_cron.ops import metrics
from django_cluster_cron.scheduler import build_scheduler
from django_cluster_cron.testing import NoWait
from tests.support.inprocess import T0, Clock, job
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
        # The due slot, and the next one recorded ahead (the default look-ahead): the counter
        # says what the ledger holds.
        recorded = JobRun.objects.filter(trigger__in=("schedule", "catchup")).count()
        assert recorded == 2
        assert slots - before["slots"] == recorded
        assert sample("cluster_cron_ticks_total") - before["ticks"] == 1
        assert REGISTRY.get_sample_value("cluster_cron_clock_offset_seconds", {"node": "metered"})
        scheduler.term.renew()
        assert sample("cluster_cron_lease_renewals_total", result="ok") - before["renewals"] == 1
    finally:
        scheduler.shutdown()
    assert sample("cluster_cron_leader", node="metered") == 0


def test_a_standby_says_it_is_not_leading_and_runs_recorded_ahead_are_counted(
    make_scheduler, redis_client
):
    """A node exports ``cluster_cron_leader 0`` from its start; a run recorded ahead of its time
    is a slot the leader decided (it was left out: the counter disagreed with the ledger)."""
    clock = Clock(T0 - timedelta(seconds=30))
    job("ahead", watermark=T0 - timedelta(seconds=60))  # its next slot is T0, 30 s away
    before = sample("cluster_cron_slots_total", outcome="schedule")
    leader = make_scheduler("leads-ahead", clock, lookahead=45)
    standby = make_scheduler("stands-by", clock, lookahead=45)
    assert REGISTRY.get_sample_value("cluster_cron_leader", {"node": "stands-by"}) == 0
    leader.step()
    standby.step()
    assert leader.is_leader
    assert not standby.is_leader
    assert REGISTRY.get_sample_value("cluster_cron_leader", {"node": "stands-by"}) == 0
    [run] = JobRun.objects.all()
    assert (run.status, run.publish_count, run.trigger) == ("pending", 0, "schedule")
    assert leader.armed.count == 1
    assert sample("cluster_cron_slots_total", outcome="schedule") - before == 1


def test_the_job_label_is_capped(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "METRICS_JOB_LABEL_LIMIT": 2}
    found = metrics.WorkerMetrics.__new__(metrics.WorkerMetrics)
    found._jobs, found._jobs_lock = set(), threading.Lock()
    assert [found.job_label(n) for n in ("a", "b", "c", "a")] == ["a", "b", metrics.OTHER_JOBS, "a"]
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "METRICS_JOB_LABEL_LIMIT": 0}
    assert found.job_label("a") == metrics.OTHER_JOBS


def test_metrics_off_is_a_no_op_everywhere(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "METRICS": False}
    assert metrics.get() is metrics.NULL
    metrics.get().runs.labels(outcome="claimed").inc()  # does nothing, raises nothing
