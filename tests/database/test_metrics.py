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

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.models import JobDefinition, JobRun
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
        # Measured: the database here shares this host's clock, so the offset is within the
        # round trip of zero, and exactly 0.0 now and then (a microsecond reading's midpoint).
        offset = REGISTRY.get_sample_value("cluster_cron_clock_offset_seconds", {"node": "metered"})
        assert offset is not None
        assert abs(offset) < 1.0
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


# -- why slots did not run, per job -------------------------------------------------------------


def not_run(job_name: str, reason: str) -> float:
    return sample("cluster_cron_slots_not_run_total", job_name=job_name, reason=reason)


def test_each_slot_not_run_is_counted_for_its_job_and_reason(make_scheduler, redis_client):
    from django_cluster_cron import actions
    from django_cluster_cron.ledger import statements
    from django_cluster_cron.models import RunStatus, RunTrigger

    clock = Clock(T0 + timedelta(seconds=1))
    # overlap: a skip job whose previous run still runs.
    skipper = job(f"skipper-{uuid.uuid4().hex[:6]}", watermark=T0 - timedelta(seconds=30),
                  overlap_policy="skip")  # fmt: skip
    JobRun.objects.create(job=skipper, scheduled_for=T0 - timedelta(minutes=1), task_id="s-1",
                          trigger=RunTrigger.SCHEDULE, status=RunStatus.RUNNING)  # fmt: skip
    # catchup_window: three slots an outage left, of which catch-up 'latest' runs one.
    late = job(f"late-{uuid.uuid4().hex[:6]}", watermark=T0 - timedelta(minutes=3),
               catchup_policy="latest")  # fmt: skip
    # excluded: an hourly job excluded on T0's date, counted when the leader plans its next
    # slot after them (the first of the next day).
    excluded = job(f"holiday-{uuid.uuid4().hex[:6]}", cron="0 * * * *",
                   watermark=T0 - timedelta(minutes=30), exclusions=[f"{T0:%Y-%m-%d}"])  # fmt: skip
    before = {
        "overlap": not_run(skipper.name, "overlap"),
        "late": not_run(late.name, "catchup_window"),
        "excluded": not_run(excluded.name, "excluded"),
    }
    scheduler = make_scheduler("node-a", clock)
    scheduler.step()
    assert not_run(skipper.name, "overlap") - before["overlap"] == 1
    assert not_run(late.name, "catchup_window") - before["late"] == 2
    assert not_run(excluded.name, "excluded") == before["excluded"]  # not planned yet
    clock.now = T0.replace(hour=0) + timedelta(days=1, seconds=1)
    scheduler.step()
    # 12:00 to 23:00 of T0's date: twelve hourly slots excluded.
    assert not_run(excluded.name, "excluded") - before["excluded"] == 12

    # buffer_full and cancelled: an operator's runs and cancel.
    full = job(f"full-{uuid.uuid4().hex[:6]}", overlap_policy="buffer_all", max_buffered=1)
    ahead = JobRun.objects.create(job=full, scheduled_for=T0, task_id="f-1",
                                  trigger=RunTrigger.SCHEDULE, status=RunStatus.QUEUED)  # fmt: skip
    assert statements.claim_run(ahead.pk, "f-1", 1, "here:1") is not None
    actions.run_now(full, by="alice")
    before_full = not_run(full.name, "buffer_full")
    assert actions.run_now(full, by="alice").status == RunStatus.SKIPPED
    assert not_run(full.name, "buffer_full") - before_full == 1

    # paused: the slots that fell while the job was paused, counted at its resume.
    paused = job(f"paused-{uuid.uuid4().hex[:6]}")
    paused.pause()
    minute = database_now().replace(second=0, microsecond=0)
    JobDefinition.objects.filter(pk=paused.pk).update(
        last_scheduled_at=minute - timedelta(minutes=5)  # then 5 slots to this minute's
    )
    paused.refresh_from_db()
    before_paused = not_run(paused.name, "paused")
    paused.resume()
    crossed = database_now().replace(second=0, microsecond=0) != minute  # a minute turned
    assert not_run(paused.name, "paused") - before_paused == (6 if crossed else 5)


def test_an_operators_cancel_is_counted_for_its_job(redis_client):
    from django_cluster_cron import actions
    from tests.support.jobs import make_job, make_run

    waiting = make_run(make_job())
    name = waiting.job.name
    before = not_run(name, "cancelled")
    actions.cancel(waiting, by="alice")
    assert not_run(name, "cancelled") - before == 1
