"""One clock, the database's (guarantee G7, docs/explanation/guarantees.md): schedulers and
workers on hosts whose clocks are off.

Real `run_scheduler` and Celery worker processes run under Debian's faketime (the wall clock of
the process 30 or 60 s off, the monotonic clock real). This test process is the observer on the
true clock: it polls the ledger every few milliseconds and stamps when each run first appears.
A scheduler that trusted its host clock records every slot 30 s early (ahead) or late (behind).

SQLite is one host whose ``'now'`` is read by the skewed process itself: there the host clock is
the database's clock by definition, so these tests need a database server.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from django_cluster_cron.ops.status import cluster_status
from tests.support.cluster import (
    assert_every_slot_once,
    every_second_job,
    faketime_path,
)
from tests.support.leases import LEASES
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        faketime_path() is None, reason="Debian's faketime is not installed (.ci/run installs it)"
    ),
]

# How early a slot may be recorded (the bound), and how late counts as on time: the
# The target is 1 s to the broker (bench/README.md); the margin is a loaded 2-core CI machine.
EARLY = timedelta(seconds=1)
ON_TIME = timedelta(seconds=1.5)


@pytest.fixture(autouse=True)
def _server_database():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite is one host: its clock is the scheduler host's own (documented)")


class Observer:
    """Stamps, on the true clock, when each run of ``job`` is first seen sent: no longer a
    ``pending`` run (its message reached the broker, or a worker took it). A run recorded ahead
    of its time is pending until its instant: when it appears says nothing of when it is sent.

    Each run gets two stamps that bound its sending whatever stalls the observer: ``seen``, when
    the query that first found it sent had returned (it was sent before), and ``not_before``,
    when the last query that did not find it had started (it was sent after).
    """

    def __init__(self, job: JobDefinition) -> None:
        self.job = job
        self.seen: dict[datetime, datetime] = {}
        self.not_before: dict[datetime, datetime] = {}
        self._last_start: datetime | None = None

    def poll(self) -> None:
        started = timezone.now()
        sent = JobRun.objects.filter(job=self.job).exclude(status=RunStatus.PENDING)
        slots = list(sent.values_list("scheduled_for", flat=True))
        returned = timezone.now()
        for slot in slots:
            if slot not in self.seen:
                self.seen[slot] = returned
                if self._last_start is not None:
                    self.not_before[slot] = self._last_start
        self._last_start = started

    def watch(self, seconds: float) -> None:
        """Stamp runs for ``seconds``: what happens during them is what the test checks."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.poll()
            time.sleep(0.01)  # the observer's polling interval

    def first(self) -> bool:
        self.poll()
        return bool(self.seen)

    def assert_on_time(self) -> None:
        """No slot recorded early; none late once the leader runs. Its first pass records the
        slots that fell while it was starting and taking the lease (the failover bound, tested
        elsewhere, governs those), so lateness is measured on the slots due after that pass."""
        assert self.seen, "nothing recorded"
        early = {s: seen for s, seen in self.seen.items() if seen < s - EARLY}
        assert not early, f"recorded before the slot (slot: seen): {sorted(early.items())[:3]}"
        first_pass = self.seen[min(self.seen)]
        steady = {s: after for s, after in self.not_before.items() if s > first_pass}
        assert len(steady) >= 4, f"too few slots after the first pass: {sorted(self.seen)}"
        late = {s: after for s, after in steady.items() if after - s > ON_TIME}
        assert not late, f"recorded late (slot: not sent before): {sorted(late.items())[:3]}"
        worst = max(after - s for s, after in steady.items()).total_seconds()
        print(f"{len(steady)} slots after the first pass; the latest recorded {worst:+.3f}s late")


@pytest.mark.parametrize(("offset", "seconds"), [("+30s", 30), ("-30s", -30)])
def test_a_leader_whose_clock_is_off_dispatches_on_the_databases_time(cluster, offset, seconds):
    job = every_second_job("skewed")
    observer = Observer(job)
    cluster.start("skewed", clock_offset=offset)
    wait_for(observer.first, 30, "the first run")
    observer.watch(6)
    observer.assert_on_time()
    assert not JobRun.objects.filter(job=job).exclude(trigger="schedule").exists()
    assert_every_slot_once(job)

    log = cluster.log("skewed")
    assert log.count("clock.skew node=skewed") == 1, log
    reported = float(log.split("clock.skew node=skewed offset=")[1].split("s")[0])
    # Measured over round trips: a loaded machine's stall may blur it, never by 30 s.
    assert abs(reported - seconds) < 2
    # The cluster page shows the node's offset (its report is refreshed every second).
    nodes = wait_for(
        lambda: [n for n in cluster_status().nodes if n.get("clock_offset") is not None],
        30,
        "a node report with its clock offset",
    )
    assert abs(nodes[0]["clock_offset"] - seconds) < 2
    assert nodes[0]["clock_skewed"] is True
    # Its report's own time is database time too: not 30 s off.
    seen = datetime.fromisoformat(nodes[0]["seen"])
    assert abs((timezone.now() - seen).total_seconds()) < 5


@pytest.mark.parametrize("lease_kind", LEASES)
def test_failover_between_skewed_and_correct_leaders_loses_and_doubles_nothing(cluster):
    cluster.settings.update({"OUTBOX_REPUBLISH_AFTER": 3})
    job = every_second_job("handover", task="tests.witness_slot", args=[])
    observer = Observer(job)
    cluster.worker("w1")
    cluster.wait_ready("w1")
    ahead = cluster.start("ahead", clock_offset="+30s")
    wait_for(observer.first, 30, "the skewed leader's first run")
    observer.watch(2)
    cluster.start("true")
    cluster.wait_started("true")  # its start-up is not part of the take-over's time
    observer.watch(1)
    ahead.kill()  # SIGKILL: "true" takes over after the lease expires
    wait_for(
        lambda: JobRun.objects.filter(job=job, dispatched_by="true").exists(),
        60,
        "the correct leader to take over",
    )
    observer.watch(2)
    cluster.start("behind", clock_offset="-30s")
    cluster.wait_started("behind")
    observer.watch(1)
    cluster.procs["true"].kill()
    wait_for(
        lambda: JobRun.objects.filter(job=job, dispatched_by="behind").exists(),
        60,
        "the skewed standby to take over",
    )
    observer.watch(3)
    cluster.procs["behind"].terminate()
    cluster.procs["behind"].wait(15)

    slots = assert_every_slot_once(job)
    nodes = set(JobRun.objects.filter(job=job).values_list("dispatched_by", flat=True))
    assert nodes == {"ahead", "true", "behind"}
    early = {s: seen for s, seen in observer.seen.items() if seen < s - EARLY}
    assert not early, f"recorded before the slot: {sorted(early.items())[:3]}"
    # Every slot runs, once: the gaps of both failovers were caught up, nothing twice. The
    # leaders are gone: a run one recorded ahead of its time and never sent is left out.
    never_sent = set(
        JobRun.objects.filter(job=job, status=RunStatus.PENDING, publish_count=0).values_list(
            "scheduled_for", flat=True
        )
    )
    assert len(never_sent) <= 1, never_sent  # at most the one instant recorded ahead
    wait_for(
        lambda: (
            not JobRun.objects.filter(
                job=job, status__in=[RunStatus.PENDING, RunStatus.QUEUED, RunStatus.RUNNING]
            )
            .exclude(scheduled_for__in=never_sent)
            .exists()
        ),
        60,
        "every run to finish",
        detail=lambda: (
            "\n".join(
                f"{run.scheduled_for:%H:%M:%S} {run.status} {run.task_id} by {run.dispatched_by} "
                f"sent {run.publish_count}x due {run.due_at}"
                for run in JobRun.objects.filter(job=job).exclude(status=RunStatus.SUCCESS)
            )
            + "\n"
            + cluster.log("w1")[-20000:]
        ),
    )
    labels = [f"{job.pk}@{slot.isoformat()}" for slot in slots if slot not in never_sent]
    executions = list(Execution.objects.filter(label__in=labels).values_list("label", flat=True))
    assert sorted(executions) == sorted(labels), "a slot ran twice or not at all"


def test_a_worker_whose_clock_is_behind_does_not_look_lost_and_reports_true_lateness(cluster):
    # Ten heartbeats per lost-after period; the body outlives the period several times.
    cluster.settings.update({"RUN_HEARTBEAT_INTERVAL": 0.3, "RUN_LOST_AFTER": 3})
    job = JobDefinition(
        name="slow-on-a-slow-clock",
        cron="* * * * * *",
        timezone="UTC",
        task="tests.witness_slot",
        args=[6],
        overlap_policy="skip",
    )
    job.full_clean()
    job.save()
    cluster.worker("behind", clock_offset="-60s")
    cluster.wait_ready("behind")
    cluster.start("leader")
    run = wait_for(
        lambda: JobRun.objects.filter(job=job, status=RunStatus.RUNNING).first(),
        30,
        "a run to start on the skewed worker",
    )
    JobDefinition.objects.filter(pk=job.pk).update(enabled=False, next_run_at=None)
    lateness = (run.started_at - run.scheduled_for).total_seconds()
    # The worker's clock would put it 60 s before the slot; a loaded machine, a few seconds after.
    assert 0 <= lateness < 20, f"started_at is the worker's clock: {lateness:+.1f}s after the slot"
    run = wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status__in=["success", "failed"]).first(),
        30,
        "the run to finish",
    )
    assert run.status == RunStatus.SUCCESS, run.error
    assert run.attempt == 1
    assert "run.lost" not in cluster.log("leader")
    assert abs((run.finished_at - run.started_at) - run.duration) < timedelta(seconds=5)
    assert timedelta(seconds=5) < run.duration < timedelta(seconds=10)
    heartbeat = JobRun.objects.get(pk=run.pk).heartbeat_at
    assert abs((heartbeat - run.finished_at).total_seconds()) < 10  # not the worker's -60 s
