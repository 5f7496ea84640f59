"""Every scheduler stopped across an instant (a deploy just before 09:00): the run the leader
recorded ahead for it goes by its job's catch-up policy wherever it is found late (issue 44,
item 1). Real `run_scheduler` nodes, Celery workers and django-tasks-db ``db_worker`` processes;
the witness is what the job's body wrote (``testapp.Execution``, labelled with its slot), not the
ledger. In process, on a clock the test moves: tests/database/test_late_unsent.py.
"""

from __future__ import annotations

import signal
from datetime import datetime, timedelta

import pytest
from django.conf import settings

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

# Seconds: the on-time grace of the processes, the gap between two slots, and how far ahead of
# the test's first slot the leader is started (it records it at once: LOOKAHEAD is longer).
GRACE = 2
PERIOD = 5
LEAD = 20


def job_from(policy: str, task: str) -> tuple[JobDefinition, datetime]:
    """A job every PERIOD seconds whose first slot is about LEAD seconds away; that slot."""
    now = database_now()
    first = (now + timedelta(seconds=LEAD)).replace(microsecond=0)
    first += timedelta(seconds=-first.second % PERIOD)
    job = JobDefinition(
        name=f"late-{policy}",
        cron=f"* * * * * */{PERIOD}",
        timezone="UTC",
        task=task,
        catchup_policy=policy,
        catchup_window=timedelta(minutes=5),
        start_at=first,
    )
    job.full_clean()
    job.save()
    return job, first


def executed(job: JobDefinition, slot: datetime) -> int:
    return int(Execution.objects.filter(label=f"{job.pk}@{slot.isoformat()}").count())


# django-tasks-db's db_worker leaves on SIGTERM by raising SystemExit from its signal handler;
# landing inside its polling query, that exit fails to end the transaction (psycopg: "can't
# change 'autocommit' now") and the process ends with 1. Nothing of ours runs there: such an
# exit is accepted only with that trace after the graceful shutdown line.
DB_WORKER_EXIT_MID_POLL = "can't change 'autocommit' now"


def stop(cluster, *names: str) -> None:
    for name in names:
        cluster.procs[name].send_signal(signal.SIGTERM)
    for name in names:
        code = cluster.procs[name].wait(60)
        log = cluster.log(name)
        if code == 1 and "shutting down gracefully" in log:
            assert DB_WORKER_EXIT_MID_POLL in log, log[-3000:]
            continue
        assert code == 0, log[-3000:]


def recorded_ahead(job: JobDefinition, slot: datetime, enqueued: bool = False) -> JobRun:
    runs = JobRun.objects.filter(job=job, scheduled_for=slot)
    if enqueued:  # deferred on its backend already
        runs = runs.exclude(backend_result_id="")
    found: JobRun = wait_for(runs.first, 60, f"the slot {slot} recorded ahead")
    return found


def everyone_stayed_down_past(run: JobRun, slot: datetime) -> None:
    """The run is still unsent and the instant not reached when everyone stopped; then real
    time must pass: past the grace and past the next slot."""
    run.refresh_from_db()
    assert (run.status, run.publish_count) == (RunStatus.PENDING, 0)
    assert database_now() < slot, "the machine stalled past the instant before the stop"
    until = slot + timedelta(seconds=PERIOD + GRACE)
    wait_for(lambda: database_now() > until, LEAD + 60, "the instant and the next slot to pass")


def assert_fate(job: JobDefinition, policy: str, slot: datetime) -> None:
    run = wait_for(
        lambda: JobRun.objects.filter(
            job=job, scheduled_for=slot, status__in=[RunStatus.MISSED, RunStatus.SUCCESS]
        ).first(),
        90,
        f"the fate of the slot {slot}",
        detail=lambda: str(list(JobRun.objects.filter(job=job).values())),
    )
    if policy == "all":
        assert (run.status, run.trigger) == (RunStatus.SUCCESS, RunTrigger.CATCHUP)
        wait_for(lambda: executed(job, slot) == 1, 30, "the body of the caught-up run")
    else:
        assert run.status == RunStatus.MISSED, run.reason
        assert run.reason.startswith("not sent at its time"), run.reason
        assert executed(job, slot) == 0


# The examples (none sent late, latest run twice); the rest is in process.
@pytest.mark.parametrize("policy", ["none", "latest"])
def test_celery_the_next_leader_judges_the_run_its_predecessor_recorded_ahead(cluster, policy):
    cluster.settings.update({"ON_TIME_GRACE": GRACE, "LOOKAHEAD": LEAD + 30})
    cluster.worker("w")
    cluster.wait_ready("w")
    job, first = job_from(policy, "tests.witness_slot")
    cluster.start("a")
    run = recorded_ahead(job, first)
    stop(cluster, "a")
    everyone_stayed_down_past(run, first)
    cluster.start("b")
    assert_fate(job, policy, first)
    # The cluster goes on: a slot after b took over runs on time.
    back = database_now() + timedelta(seconds=PERIOD)
    wait_for(
        lambda: JobRun.objects.filter(
            job=job, scheduled_for__gt=back, status=RunStatus.SUCCESS
        ).exists(),
        60,
        "a later slot to run",
    )
    assert executed(job, first) == (1 if policy == "all" else 0)
    assert "runs.found_late" in cluster.log("b")


@pytest.mark.skipif(not settings.HAS_DJANGO_TASKS, reason="django-tasks-db is not installed")
@pytest.mark.parametrize("lease_kind", ["database"])
@pytest.mark.parametrize("policy", ["none", "all"])
def test_django_tasks_a_worker_judges_a_deferred_run_it_receives_late(cluster, policy):
    cluster.settings.update({"ON_TIME_GRACE": GRACE, "LOOKAHEAD": LEAD + 30})
    cluster.db_worker("early")
    cluster.wait_db_worker("early")
    job, first = job_from(policy, "tests.testapp.dtasks.witness_slot")
    cluster.start("a")
    run = recorded_ahead(job, first, enqueued=True)
    # The whole cluster stops (its db_worker too) with the run deferred on the backend.
    stop(cluster, "a", "early")
    everyone_stayed_down_past(run, first)
    # A worker comes back first; no scheduler runs.
    cluster.db_worker("late")
    assert_fate(job, policy, first)
