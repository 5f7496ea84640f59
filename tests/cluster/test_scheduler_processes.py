"""Real `run_scheduler` processes against one database (and Redis, with the Redis lease):
failover, pauses, crashes — with each lease backend.

Short TTLs keep the file fast; the bounds asserted are the guarantee (G3,
docs/explanation/guarantees.md) plus room for three stalls of a loaded machine
(tests/support/timing.py). They say a standby takes over through the lease (2 s TTL, 0.2 s
poll), not through a later sweep or a restart; that SIGTERM released the lease is read from the
old leader's log. The measured numbers are printed by bench/failover.py.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, SchedulerLease
from tests.support.cluster import (
    POLL,
    TTL,
    assert_every_slot_once,
    cut_other_connections,
    every_second_job,
)
from tests.support.leases import LEASES
from tests.support.timing import quiet_for, stalls
from tests.support.waiting import wait_for

# Every test runs with each lease backend.
pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.parametrize("lease_kind", LEASES),
]


def leader() -> tuple[str, int] | None:
    row = SchedulerLease.objects.filter(name="leader").values_list("holder", "epoch").first()
    return row if row and row[0] else None


def first_dispatch_by(node: str, job: JobDefinition):
    """When ``node`` first sent a run of ``job`` (it may have been recorded ahead by another)."""
    sent = JobRun.objects.filter(job=job, dispatched_by=node, queued_at__isnull=False)
    run = sent.order_by("queued_at").first()
    return run.queued_at if run else None


def sent_after(node: str, job: JobDefinition, instant: datetime):
    """Whether ``node`` has sent a run of ``job`` due after ``instant``: a leader that took over
    then has its first pass, which caught up the slots of the gap, behind it."""
    sent = JobRun.objects.filter(job=job, dispatched_by=node, queued_at__isnull=False)
    return sent.filter(scheduled_for__gt=instant).exists()


def every_job_sent(jobs: list[JobDefinition], count: int):
    sent = JobRun.objects.filter(queued_at__isnull=False)
    return all(sent.filter(job=job).count() >= count for job in jobs)


def test_three_schedulers_record_each_slot_exactly_once(cluster):
    jobs = [every_second_job(f"tick-{i}") for i in range(3)]
    for node in ("a", "b", "c"):
        cluster.start(node)
    wait_for(leader, 60, "a leader")
    # Three nodes run side by side while the leader sends four slots of each job.
    wait_for(lambda: every_job_sent(jobs, 4), 60, "four slots of each job sent")
    # One leader at a time: every run of an epoch was sent by the same node. (A leader stalled
    # past its TTL on a loaded machine hands over to a new epoch; that is failover, not a fault.)
    senders: dict[int, set[str]] = {}
    for epoch, node in JobRun.objects.values_list("epoch", "dispatched_by"):
        senders.setdefault(epoch, set()).add(node)
    assert all(len(nodes) == 1 for nodes in senders.values()), senders
    for job in jobs:
        assert len(assert_every_slot_once(job)) >= 4


def test_sigkill_of_the_leader_hands_over_within_ttl_plus_poll(cluster):
    job = every_second_job()
    cluster.start("a")
    wait_for(lambda: first_dispatch_by("a", job), 60, "a to dispatch")
    cluster.start("b")
    cluster.wait_started("b")
    cluster.wait_standby("b")  # its first tries at the lease are behind it
    killed_at = timezone.now()
    cluster.procs["a"].kill()
    took_over = wait_for(lambda: first_dispatch_by("b", job), 60, "b to dispatch")
    failover = (took_over - killed_at).total_seconds()
    print(f"failover after SIGKILL: {failover:.2f}s (ttl {TTL}s, poll {POLL}s)")
    assert failover <= TTL + POLL + stalls(3)
    wait_for(lambda: sent_after("b", job, took_over), 30, "b to send a slot due after it took over")
    assert_every_slot_once(job)  # the slots of the gap were caught up, none twice


def test_sigterm_releases_the_lease_and_a_standby_takes_over_at_once(cluster):
    job = every_second_job()
    a = cluster.start("a")
    wait_for(lambda: first_dispatch_by("a", job), 60, "a to dispatch")
    cluster.start("b")
    cluster.wait_started("b")
    cluster.wait_standby("b")  # its first tries at the lease are behind it
    stopped_at = timezone.now()
    a.send_signal(signal.SIGTERM)
    assert a.wait(10) == 0
    took_over = wait_for(lambda: first_dispatch_by("b", job), 60, "b to dispatch")
    handover = (took_over - stopped_at).total_seconds()
    print(f"handover after SIGTERM: {handover:.2f}s")
    assert handover <= 2.0 + stalls(3)
    assert "lease.released" in cluster.log("a")
    wait_for(lambda: sent_after("b", job, took_over), 30, "b to send a slot due after it took over")
    assert_every_slot_once(job)


def test_a_leader_paused_past_its_ttl_is_fenced_and_writes_nothing_stale(cluster):
    if connection.vendor == "sqlite":
        # A leader paused in the milliseconds it commits holds SQLite's file lock, and every
        # other process waits for it (seen: 'database is locked'); a server database ends
        # nothing of the sort, so this runs on PostgreSQL and MariaDB.
        pytest.skip("SQLite: a process paused while it commits locks the file for every other")
    job = every_second_job()
    a = cluster.start("a")
    wait_for(lambda: first_dispatch_by("a", job), 60, "a to dispatch")
    current = leader()
    assert current is not None
    old_epoch = current[1]
    cluster.start("b")
    cluster.wait_standby("b")
    os.kill(a.pid, signal.SIGSTOP)
    wait_for(lambda: first_dispatch_by("b", job), 60, "b to take over")
    # Time must pass: a stays frozen a second into b's term, and wakes with a stale view of it.
    time.sleep(1)
    resumed_at = timezone.now()
    os.kill(a.pid, signal.SIGCONT)
    wait_for(
        lambda: "lease.lost" in cluster.log("a") or "lease.fenced" in cluster.log("a"),
        30,
        "a to find on waking that its lease is gone",
    )
    # A negative check, so time must pass: for 3 s a lives on as a standby and writes nothing.
    stale = Q(created_at__gt=resumed_at) | Q(queued_at__gt=resumed_at)
    quiet_for(
        3,
        lambda: a.poll() is not None or JobRun.objects.filter(stale, epoch=old_epoch).exists(),
        "the old leader crashing, or writing in its stale epoch,",
    )
    assert a.poll() is None, "the old leader must go back to standby, not crash"
    assert not JobRun.objects.filter(stale, epoch=old_epoch).exists()
    assert "lease.lost" in cluster.log("a") or "lease.fenced" in cluster.log("a")
    assert_every_slot_once(job)


def test_a_crash_between_recording_and_publishing_is_healed_by_the_outbox(cluster, redis_client):
    job = every_second_job()
    crashing = cluster.start("crashy", fault="after_record")
    assert crashing.wait(30) == 70
    pending = list(
        JobRun.objects.filter(job=job, status=RunStatus.PENDING).values_list("task_id", flat=True)
    )
    assert pending, "the crash left recorded, unpublished runs"
    assert redis_client.llen("celery") == 0
    cluster.start("healer", settings={"OUTBOX_REPUBLISH_AFTER": 1})
    wait_for(
        lambda: not JobRun.objects.filter(task_id__in=pending, status=RunStatus.PENDING).exists(),
        20,
        "the outbox to publish the orphaned runs",
    )
    sent = {json.loads(raw)["headers"]["id"] for raw in redis_client.lrange("celery", 0, -1)}
    assert set(pending) <= sent
    # At once, not after the outbox's wait (the line comes once the runs are marked sent).
    wait_for(lambda: "runs.taken_over" in cluster.log("healer"), 10, "the healer's take-over line")


def test_a_redis_outage_pauses_dispatch_and_recovery_catches_up_every_slot(
    cluster, throwaway_redis, lease_kind
):
    cluster.env["REDIS_URL"] = throwaway_redis.url  # the broker, and the lease if it is Redis's
    job = every_second_job()
    # Policy 'all' with a cap above the outage's slot count: every missed slot must be run.
    a = cluster.start("a", settings={"OUTBOX_REPUBLISH_AFTER": 1, "CATCHUP_CAP": 100})
    wait_for(lambda: first_dispatch_by("a", job), 60, "a to dispatch")
    throwaway_redis.stop()
    # Time must pass: the outage outlasts the lease TTL (a Redis lease is gone by then).
    time.sleep(TTL + 4)
    assert a.poll() is None, "the scheduler must survive a Redis outage"
    during = JobRun.objects.filter(job=job).count()
    if lease_kind == "redis":
        # A negative check, so time must pass: two more seconds of every-second slots.
        quiet_for(
            2,
            lambda: JobRun.objects.filter(job=job).count() != during,
            "a run recorded without a lease",
        )
    else:
        # The database lease still holds: slots are recorded on time and wait in the outbox
        # for the broker (Redis here) to come back.
        wait_for(
            lambda: JobRun.objects.filter(job=job).count() > during,
            30,
            "a slot recorded during the outage",
        )
        assert JobRun.objects.filter(job=job, status=RunStatus.PENDING).exists()
    throwaway_redis.restart()
    wait_for(
        lambda: (
            # Pending runs that are due: the next second's, recorded ahead, is pending by right.
            not JobRun.objects.filter(
                job=job, status=RunStatus.PENDING, due_at__lte=timezone.now()
            ).exists()
            and JobRun.objects.filter(job=job).count() > during + 3
        ),
        30,
        "recovery and catch-up",
    )
    log = cluster.log("a")
    if lease_kind == "redis":
        assert log.count("redis.down") == 1, log
        assert "redis.up" in log
    else:
        assert "redis.down" not in log
        assert "broker.down" in log
        assert "broker.up" in log
        assert "lease.lost" not in log
    assert_every_slot_once(job)


def test_lost_database_connections_are_survived_and_every_slot_still_recorded(cluster):
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server whose sessions could be cut")
    job = every_second_job()
    a = cluster.start("a", settings={"CATCHUP_CAP": 100})
    wait_for(lambda: first_dispatch_by("a", job), 60, "a to dispatch")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # cut the scheduler's connections again and again
        cut_other_connections()
        time.sleep(0.3)  # the fault's rhythm: a cut every 0.3 s for 3 s
    before = JobRun.objects.filter(job=job).count()
    wait_for(lambda: JobRun.objects.filter(job=job).count() > before + 2, 20, "dispatch to resume")
    assert a.poll() is None
    log = cluster.log("a")
    assert "db.down" in log
    assert "db.up" in log
    assert_every_slot_once(job)


def test_runs_recorded_ahead_by_a_killed_leader_are_sent_by_the_next_at_their_instant(cluster):
    """A leader records jobs' next runs ahead and dies (SIGKILL) holding their built messages:
    the next leader takes them over from the rows and sends each at its due time, not before,
    under its task id, and a worker runs each slot once."""
    from tests.testapp.models import Execution

    jobs = [
        every_second_job(f"ahead-{i}", cron="* * * * * */10", task="tests.witness_slot", args=[])
        for i in range(4)
    ]
    cluster.worker("w1", concurrency=2)
    cluster.wait_ready("w1")

    def recorded_ahead():
        # Due at least 4 s from now: the next leader takes over before then.
        soon = timezone.now() + timedelta(seconds=4)
        runs = JobRun.objects.filter(status=RunStatus.PENDING, due_at__gt=soon)
        return runs.count() == len(jobs)

    # A slot ten seconds apart comes round well within a look-ahead of 60 s.
    cluster.start("a")
    wait_for(recorded_ahead, 30, "a to record the jobs' next runs ahead")
    killed = cluster.procs["a"]
    killed.kill()
    killed.wait()
    killed_at = timezone.now()
    # What a held when it died: its runs due after its death (it never sends a run before its
    # due time), read after the kill. Not "pending and never marked sent": a marks the runs it
    # sent after the rest of its pass, so one killed on a loaded machine just after an instant
    # leaves runs it did send unmarked, and their dispatcher rightly stays a.
    unsent = JobRun.objects.filter(
        status=RunStatus.PENDING, publish_count=0, due_at__gt=killed_at + timedelta(seconds=1)
    )
    ahead = dict(unsent.values_list("pk", "task_id"))
    assert ahead, "a died holding no run recorded ahead"
    cluster.start("b")
    # Succeeded, and marked sent: b marks what it sent at the end of its pass, which a fast
    # worker can finish a run before (on a loaded machine it did).
    done = JobRun.objects.filter(pk__in=ahead, status=RunStatus.SUCCESS, publish_count__gte=1)
    wait_for(
        lambda: done.count() == len(ahead),
        30,
        "the runs a recorded ahead to succeed and be marked sent",
    )
    for run in JobRun.objects.filter(pk__in=ahead):
        assert run.task_id == ahead[run.pk]  # the same run, under its task id
        assert run.dispatched_by == "b"
        assert run.queued_at >= run.due_at, "sent before it was due"
        assert run.started_at >= run.due_at, "started before it was due"
    assert "runs.taken_over" in cluster.log("b")
    labels = list(Execution.objects.values_list("label", flat=True))
    assert len(labels) == len(set(labels)), "a slot ran twice"
