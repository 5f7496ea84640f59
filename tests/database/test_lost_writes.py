"""A database that lost writes it had acknowledged (a lossy promote, a restore) is noticed, and
each slot whose fate went with them is decided by its job's ``on_uncertain`` (issue 45, item 4).

In process, on the real database and lease: schedulers on a clock the test moves; the loss is
made by putting the ledger back as it was at an earlier instant (runs recorded since deleted,
runs finished since back to waiting, watermarks and the leader row back), as a standby promoted
before those writes reached it would hold it. The same server answers, so the cause logged is a
restore rather than a failover; with a real asynchronous standby promoted:
tests/cluster/test_failover_processes.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from django_cluster_cron.leases.base import LEADER
from django_cluster_cron.models import (
    JobDefinition,
    JobRun,
    RunStatus,
    RunTrigger,
    SchedulerLease,
)
from tests.support.inprocess import T0, Clock, job, take_over
from tests.support.leases import LEASES

pytestmark = pytest.mark.django_db(transaction=True)

S = timedelta(seconds=1)
PERIOD = 2  # seconds between two slots of the test's jobs
LEASE_COLUMNS = ("epoch", "writes", "last_write_at", "token", "holder", "valid_until")


@dataclass
class Snapshot:
    """The ledger as a standby that stopped receiving writes at this instant holds it."""

    lease: dict[str, Any]
    runs: dict[int, tuple[str, int]]
    jobs: dict[int, tuple[datetime | None, datetime | None]]

    @classmethod
    def take(cls) -> Snapshot:
        lease = SchedulerLease.objects.filter(name=LEADER).values(*LEASE_COLUMNS).get()
        runs = {
            pk: (s, c) for pk, s, c in JobRun.objects.values_list("pk", "status", "publish_count")
        }
        jobs = {
            pk: (w, n)
            for pk, w, n in JobDefinition.all_objects.values_list(
                "pk", "last_scheduled_at", "next_run_at"
            )
        }
        return cls(lease, runs, jobs)

    def restore(self) -> None:
        """Every write since the snapshot lost."""
        JobRun.objects.exclude(pk__in=self.runs).delete()
        for pk, (status, count) in self.runs.items():
            JobRun.objects.filter(pk=pk).update(status=status, publish_count=count)
        for pk, (watermark, next_run) in self.jobs.items():
            JobDefinition.all_objects.filter(pk=pk).update(
                last_scheduled_at=watermark, next_run_at=next_run
            )
        SchedulerLease.objects.filter(name=LEADER).update(**self.lease)


def every_two_seconds(name: str, on_uncertain: str) -> JobDefinition:
    made: JobDefinition = job(
        name,
        cron=f"* * * * * */{PERIOD}",
        watermark=T0 - PERIOD * S,
        on_uncertain=on_uncertain,
        catchup_policy="all",
    )
    return made


def step_to(scheduler, clock: Clock, until: datetime, *also) -> None:
    """Move the clock a second at a time up to ``until``, one pass of each scheduler each."""
    while clock.now < until:
        clock.advance(1)
        scheduler.step()
        for other in also:
            other.step()


def runs_of(job: JobDefinition) -> dict[datetime, tuple[str, str]]:
    return {
        slot: (status, trigger)
        for slot, status, trigger in JobRun.objects.filter(job=job).values_list(
            "scheduled_for", "status", "trigger"
        )
    }


def slots(first: datetime, last: datetime) -> list[datetime]:
    count = int((last - first).total_seconds()) // PERIOD + 1
    return [first + k * PERIOD * S for k in range(count)]


@pytest.mark.parametrize("lease_kind", LEASES)
def test_the_leader_finds_the_ledger_went_back_under_it_and_decides_each_job_by_its_choice(
    make_scheduler, caplog
):
    clock = Clock(T0 - 0.9 * S)
    skip = every_two_seconds("at-most-once", "skip")
    run = every_two_seconds("at-least-once", "run")
    leader = make_scheduler("node-a", clock)
    leader.step()
    step_to(leader, clock, T0 + 2.1 * S)
    assert set(runs_of(skip)) == {T0, T0 + 2 * S}
    kept = Snapshot.take()
    step_to(leader, clock, T0 + 8.1 * S)
    # Workers finished the first two slots meanwhile (lost too).
    JobRun.objects.filter(scheduled_for__lte=T0 + 2 * S).update(status=RunStatus.SUCCESS)
    kept.restore()

    clock.advance(1)  # T0 + 9.1 s
    leader.step()
    assert "lease.went_back node=node-a" in caplog.text
    assert "runs.uncertain node=node-a" in caplog.text
    lost = slots(T0, T0 + 8 * S)
    # skip: every slot of the window recorded (or turned) uncertain, none left to run.
    assert {slot: status for slot, (status, _t) in runs_of(skip).items() if slot in lost} == {
        slot: RunStatus.UNCERTAIN for slot in lost
    }
    # run: the slots whose rows were lost recorded again to run, the runs the server kept
    # waiting go on; all said to be uncertain.
    found = runs_of(run)
    assert {slot: found[slot][1] for slot in lost} == {slot: RunTrigger.UNCERTAIN for slot in lost}
    assert all(found[slot][0] != RunStatus.UNCERTAIN for slot in lost)
    assert JobRun.objects.get(job=run, scheduled_for=T0 + 4 * S).reason.startswith("uncertain: ")
    # Dispatch goes on: the next slot is an ordinary one for both jobs.
    step_to(leader, clock, T0 + 10.1 * S)
    for each in (skip, run):
        assert runs_of(each)[T0 + 10 * S] == (RunStatus.QUEUED, RunTrigger.SCHEDULE)
    assert caplog.text.count("runs.uncertain") == 1


@pytest.mark.parametrize("lease_kind", LEASES)
def test_a_standby_that_saw_the_lost_writes_decides_them_when_it_takes_over(make_scheduler, caplog):
    clock = Clock(T0 - 0.9 * S)
    skip = every_two_seconds("at-most-once", "skip")
    leader = make_scheduler("node-a", clock, ttl=2.0)
    standby = make_scheduler("node-b", clock, ttl=2.0)
    leader.step()
    standby.step()
    assert leader.is_leader
    assert not standby.is_leader
    step_to(leader, clock, T0 + 2.1 * S, standby)
    kept = Snapshot.take()
    step_to(leader, clock, T0 + 8.1 * S, standby)
    seen_epoch = leader.epoch
    # The leader's host is gone with the old primary; the standby leads on what was kept.
    kept.restore()
    leader.term.fence = None
    clock.advance(1)
    take_over(standby)
    standby.step()
    assert "lease.went_back node=node-b" in caplog.text
    assert standby.epoch > seen_epoch  # never an epoch a node saw issued
    found = runs_of(skip)
    assert all(found[slot][0] == RunStatus.UNCERTAIN for slot in slots(T0, T0 + 8 * S))


@pytest.mark.parametrize("lease_kind", ["database"])
def test_an_epoch_edited_back_alone_loses_nothing_and_the_next_term_goes_above_it(
    make_scheduler, caplog
):
    clock = Clock(T0 - 0.9 * S)
    skip = every_two_seconds("at-most-once", "skip")
    first = make_scheduler("node-a", clock, ttl=2.0)
    first.step()
    step_to(first, clock, T0 + 4.1 * S)
    first.shutdown()  # releases the lease: the next term is a new one
    # node-a2 had seen the row at epoch 6 before someone edited it back to 1.
    SchedulerLease.objects.filter(name=LEADER).update(epoch=1)
    second = make_scheduler("node-a2", clock, ttl=2.0)
    second.term.horizon.observe(6, 0, None, "")
    clock.advance(1)
    second.step()
    assert second.is_leader
    assert second.epoch == 7
    assert "epoch is below one this node saw" in caplog.text
    assert "runs.uncertain" not in caplog.text
    assert RunStatus.UNCERTAIN not in {status for status, _t in runs_of(skip).values()}
