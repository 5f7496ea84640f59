"""What ``django_cluster_cron.testing`` gives users' own tests: locks without Redis or a table."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.conf import settings as django_settings

from django_cluster_cron.locks import SKIPPED, ClusterLock, cluster_lock
from django_cluster_cron.models import JobDefinition, RunStatus
from django_cluster_cron.testing import MemoryLeaseBackend, assert_ran, ledger, run_due


def test_a_memory_backend_excludes_a_second_holder_and_frees_on_release():
    backend = MemoryLeaseBackend()
    with ClusterLock("nightly-report", ttl=30, backend=backend):
        assert not ClusterLock("nightly-report", ttl=30, backend=backend).acquire()
    other = ClusterLock("nightly-report", ttl=30, backend=backend)
    assert other.acquire()
    other.release()


def test_its_clock_can_be_moved_by_hand_to_expire_a_lease():
    now = [1000.0]
    backend = MemoryLeaseBackend(clock=lambda: now[0])
    holder = backend.lease("lock:x", "node-a", ttl=5)
    other = backend.lease("lock:x", "node-b", ttl=5)
    assert holder.try_acquire()
    assert not other.try_acquire()
    now[0] += 5.1
    assert other.try_acquire()
    assert not holder.renew()


def test_the_memory_setting_serves_cluster_lock_without_any_service(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "memory"}
    calls = []

    @cluster_lock("report", ttl=5)
    def report():
        calls.append(1)
        return "done"

    with ClusterLock("report", ttl=5):
        assert report() is SKIPPED
    assert report() == "done"
    assert calls == [1]


# -- run_due and the ledger assertions: a user's test of a scheduled job, no scheduler or worker --

UTC = timezone.utc
# The tests' days: a month ahead of the real one, at midnight UTC. A run an overlap policy held
# back is released by a worker against the database's clock (it ages past the catch-up window
# by that clock), so the slots played here must not be in the past of the real day: fixed past
# dates failed here once the real clock passed them by the window.
BASE = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=30)


def at(day: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    """Day ``day`` of the tests' calendar (23 is the first) at ``hour:minute:second`` UTC."""
    return BASE + timedelta(days=day - 23, hours=hour, minutes=minute, seconds=second)


def nightly(**fields):
    fields.setdefault("task", "tests.record")
    fields.setdefault("args", ["nightly"])
    job = JobDefinition(name=f"nightly-{len(fields)}", cron="0 3 * * *", timezone="UTC", **fields)
    job.full_clean()
    job.save()
    # As if it had been created the day before at noon.
    JobDefinition.objects.filter(pk=job.pk).update(
        last_scheduled_at=at(23, 12),
        next_run_at=at(24, 3),
    )
    job.refresh_from_db()
    return job


@pytest.mark.django_db(transaction=True)
def test_run_due_runs_the_slot_due_at_now_through_the_real_ledger(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "memory"}
    job = nightly()
    assert run_due(at(24, 2, 59)) == []  # not due yet
    [run] = run_due(at(24, 3, 0, 1))
    assert (run.status, run.scheduled_for) == (
        RunStatus.SUCCESS,
        at(24, 3),
    )
    assert_ran(job, at=at(24, 3))
    assert run_due(at(24, 3, 0, 2)) == []  # once per slot


@pytest.mark.django_db(transaction=True)
def test_run_due_applies_the_catch_up_policy_and_records_what_it_skips(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "memory"}
    job = nightly(catchup_policy="latest", catchup_window=timedelta(days=5))
    # Three nights later: `latest` runs the last slot only and records the two before as missed.
    runs = run_due(at(26, 3, 0, 5))
    assert [r.status for r in runs] == [RunStatus.SUCCESS]
    assert len(ledger(job, status=RunStatus.MISSED)) == 2
    first = f"{at(24, 3):%Y-%m-%d %H:%M:%S}Z"
    with pytest.raises(AssertionError, match=f"the ledger holds: {first} missed"):
        assert_ran(job, times=3)


@pytest.mark.django_db(transaction=True)
def test_run_due_runs_what_buffer_all_held_back_in_slot_order(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "memory"}
    job = nightly(
        catchup_policy="all", catchup_window=timedelta(days=5), overlap_policy="buffer_all"
    )
    # Three nights later: catch-up "all" records the three; buffer_all holds two behind the
    # first, and each runs when the one before has ended.
    runs = run_due(at(26, 3, 0, 5))
    assert [r.status for r in runs] == [RunStatus.SUCCESS] * 3
    assert [r.scheduled_for for r in runs] == [at(24, 3), at(25, 3), at(26, 3)]
    assert_ran(job, times=3)


@pytest.mark.django_db(transaction=True)
def test_run_due_can_record_without_running(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "memory"}
    job = nightly()
    [run] = run_due(at(24, 3, 0, 1), execute=False)
    assert run.status == RunStatus.QUEUED
    assert ledger(job, status=RunStatus.SUCCESS) == []


@pytest.mark.django_db
@pytest.mark.skipif(not django_settings.HAS_DJANGO_TASKS, reason="django-tasks-db is not installed")
def test_run_due_runs_a_django_tasks_task_here_inside_the_tests_transaction(settings):
    from tests.testapp.models import Execution

    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "memory"}
    job = nightly(task="tests.testapp.dtasks.whoami", args=[])
    [run] = run_due(at(24, 3, 0, 1))
    assert run.status == RunStatus.SUCCESS
    assert run.result == repr([run.pk, 1, run.task_id])
    assert run.backend_result_id
    job.task, job.args = "tests.testapp.dtasks.record", ["nightly"]
    job.save()
    [run] = run_due(at(25, 3, 0, 1))
    assert run.status == RunStatus.SUCCESS
    assert Execution.objects.filter(label="nightly").count() == 1
