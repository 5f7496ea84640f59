"""The overlap policies that hold runs back (``buffer_all``) or stop the runs ahead
(``cancel_other``, ``terminate_other``), in process: what each records, the release in slot
order, the cap, the aging, a paused job, an operator's override, and what may be saved.

The timelines with real schedulers and workers are in
tests/cluster/test_overlap_processes.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from django_cluster_cron import actions
from django_cluster_cron.dbtime import database_now
from django_cluster_cron.ledger import buffer, statements
from django_cluster_cron.models import JobRun, RunStatus, RunTrigger
from tests.support.jobs import apply, make_job, make_run

pytestmark = pytest.mark.django_db(transaction=True)


def statuses(job):
    return list(
        JobRun.objects.filter(job=job).order_by("scheduled_for").values_list("status", flat=True)
    )


def running(job):
    run = make_run(job)
    assert statements.claim_run(run.pk, run.task_id, 1, "here:1", pool="prefork") is not None
    return run


def backfill_slots(job, count):
    """A backfill of the job's last ``count`` minutes (its cron: every minute)."""
    end = database_now().replace(second=0, microsecond=0)
    return actions.backfill(job, end - timedelta(minutes=count), end, by="alice")


def minutely(**fields):
    """A running (not paused) job of every minute."""
    job = make_job(task="tests.add", args=[1, 2], **fields)
    job.cron, job.enabled = "* * * * *", True
    job.save()
    return job


@pytest.fixture(autouse=True)
def broker(redis_client):
    """Runs made ``pending`` are sent to the suite's broker (emptied around each test)."""
    return redis_client


# -- buffer_all ---------------------------------------------------------------------------------


def test_buffer_all_holds_runs_back_behind_the_running_one_up_to_its_cap():
    job = minutely(overlap_policy="buffer_all", max_buffered=2)
    running(job)
    made = [actions.run_now(job, by="alice") for _ in range(3)]
    assert [run.status for run in made] == ["buffered", "buffered", "skipped"]
    assert made[0].reason == "overlap policy 'buffer_all': waits its turn"
    assert made[2].reason == "overlap policy 'buffer_all': buffer full (2 runs waiting)"
    assert buffer.depths() == {job.name: 2}


def test_held_runs_are_released_one_at_a_time_in_slot_order_once_nothing_runs_ahead():
    job = minutely(overlap_policy="buffer_all")
    ahead = running(job)
    runs = backfill_slots(job, 3)  # the job's own policy is a buffering one: all wait
    assert sorted(r.status for r in runs) == ["buffered"] * 3
    now = database_now()
    assert buffer.release([job.pk], now=now).runs == []  # the run ahead still runs
    JobRun.objects.filter(pk=ahead.pk).update(status=RunStatus.SUCCESS)
    order = []
    for _ in range(3):
        released = buffer.release([job.pk], now=now)
        assert len(released.runs) == 1
        order.append(released.runs[0].scheduled_for)
        assert buffer.release([job.pk], now=now).runs == []  # one at a time
        JobRun.objects.filter(pk=released.runs[0].pk).update(status=RunStatus.SUCCESS)
    assert order == sorted(r.scheduled_for for r in runs)
    assert released.runs[0].due_at == now  # it waited by policy: not late when it starts


def test_a_worker_that_ends_a_run_releases_the_next_and_it_runs():
    job = minutely(overlap_policy="buffer_all")
    first = running(job)
    waiting = actions.run_now(job, by="alice")
    assert waiting.status == RunStatus.BUFFERED
    JobRun.objects.filter(pk=first.pk).update(status=RunStatus.QUEUED, attempt=1)
    apply(first)  # ends the run ahead, releases and sends the next
    waiting.refresh_from_db()
    assert waiting.status == RunStatus.QUEUED
    assert apply(waiting).status == RunStatus.SUCCESS


def test_held_runs_past_the_catch_up_window_are_missed_and_a_paused_jobs_slots_dropped():
    job = minutely(overlap_policy="buffer_all", catchup_window=timedelta(minutes=2))
    running(job)
    backfill_slots(job, 5)
    later = database_now()
    released = buffer.release([job.pk], now=later)
    assert released.aged == {job.name: 3}  # the slots more than 2 minutes old
    assert statuses(job).count(RunStatus.MISSED) == 3
    missed = JobRun.objects.filter(job=job, status=RunStatus.MISSED).first()
    assert "past the job's catch-up window" in missed.reason
    # Paused: its own slots waiting their turn go; an operator's runs of it still run.
    JobRun.objects.filter(job=job, status=RunStatus.BUFFERED).update(trigger=RunTrigger.SCHEDULE)
    held = actions.run_now(job, by="alice")
    job.pause("maintenance")
    released = buffer.release([job.pk], now=later)
    assert released.dropped == {job.name: 2}
    assert list(JobRun.objects.filter(job=job, status=RunStatus.BUFFERED)) == [held]
    assert "its job was paused while it waited its turn" in (
        JobRun.objects.filter(job=job, status=RunStatus.SKIPPED).first().reason
    )


def test_an_operator_can_cancel_a_held_run():
    job = minutely(overlap_policy="buffer_all")
    running(job)
    held = actions.run_now(job, by="alice")
    assert actions.cancel(held, by="alice").status == RunStatus.CANCELLED


# -- cancel_other, terminate_other --------------------------------------------------------------


@pytest.mark.parametrize("policy", ["cancel_other", "terminate_other"])
def test_a_new_slot_asks_the_running_run_to_stop_and_takes_the_place_of_older_ones(policy):
    job = minutely(overlap_policy=policy)
    ahead = running(job)
    queued = make_run(job)  # an earlier slot still waiting
    first = actions.run_now(job, by="alice")
    assert first.status == RunStatus.BUFFERED
    ahead.refresh_from_db()
    assert ahead.cancel_requested_by == f"overlap policy {policy}"
    assert "takes its place" in ahead.reason
    queued.refresh_from_db()
    assert queued.status == RunStatus.CANCELLED
    newer = actions.run_now(job, by="alice")
    first.refresh_from_db()
    assert (first.status, newer.status) == (RunStatus.SKIPPED, RunStatus.BUFFERED)
    assert "superseded by the newer slot" in first.reason


def test_terminate_other_is_terminated_by_the_leader_at_once_cancel_other_never():
    from django_cluster_cron.ledger import transitions
    from django_cluster_cron.ledger.fence import Fence

    fence = Fence.claim("node", "token")
    terminated, cancelled = (
        minutely(overlap_policy="terminate_other"),
        minutely(overlap_policy="cancel_other"),
    )
    for job in (terminated, cancelled):
        running(job)
        actions.run_now(job, by="alice")
    found = transitions.terminating(now=database_now(), fence=fence, limit=10)
    assert [run.job_id for run in found] == [terminated.pk]


def test_terminate_other_and_a_cancel_grace_are_refused_where_nothing_can_terminate():
    job = make_job(task="tests.testapp.dtasks.record", args=["x"])
    job.overlap_policy = "terminate_other"
    with pytest.raises(ValidationError) as refused:
        job.full_clean()
    assert "Use cancel_other" in str(refused.value.message_dict["overlap_policy"])
    job.overlap_policy = "cancel_other"
    job.full_clean()  # the cooperative cancel works on django.tasks


# -- an operator's override ---------------------------------------------------------------------


def test_a_backfill_waits_its_turn_by_default_whatever_the_jobs_policy():
    job = minutely(overlap_policy="allow")
    runs = backfill_slots(job, 3)
    assert statuses(job) == ["queued", "buffered", "buffered"]
    assert {r.trigger for r in runs} == {RunTrigger.BACKFILL}
    # The job's own scheduled runs go by its own policy: they never wait behind the backfill.
    assert actions.run_now(job, by="alice").status == RunStatus.QUEUED


def test_run_now_and_backfill_take_an_overlap_policy_and_refuse_an_unknown_one():
    job = minutely(overlap_policy="buffer_all")
    running(job)
    assert actions.run_now(job, by="alice", overlap_policy="allow").status == RunStatus.QUEUED
    assert actions.run_now(job, by="alice", overlap_policy="skip").status == RunStatus.SKIPPED
    with pytest.raises(actions.ActionRefused, match="Unknown overlap policy 'never'"):
        actions.run_now(job, by="alice", overlap_policy="never")
    runs = backfill_slots(job, 2)
    assert {r.status for r in runs} == {RunStatus.BUFFERED}
    djob = make_job(task="tests.testapp.dtasks.record", args=["x"])
    with pytest.raises(actions.ActionRefused, match=r"django\.tasks task cannot be terminated"):
        actions.run_now(djob, by="alice", overlap_policy="terminate_other")


def test_a_new_slot_of_cancel_other_goes_at_once_when_the_runs_ahead_had_not_started():
    job = minutely(overlap_policy="cancel_other")
    queued = make_run(job)  # sent, not yet taken by a worker: cancelled, nothing to wait for
    newest = actions.run_now(job, by="alice")
    queued.refresh_from_db()
    assert queued.status == RunStatus.CANCELLED
    assert newest.status == RunStatus.QUEUED


def test_the_leader_records_a_buffer_all_slot_held_and_a_cancel_other_slot_preempting(
    make_scheduler,
):
    from tests.support.inprocess import T0, Clock, job

    clock = Clock(T0 + timedelta(seconds=1))
    held = job("held", watermark=T0 - timedelta(seconds=30), overlap_policy="buffer_all")
    preempting = job("preempting", watermark=T0 - timedelta(seconds=30),
                     overlap_policy="cancel_other")  # fmt: skip
    for ahead in (held, preempting):
        JobRun.objects.create(job=ahead, scheduled_for=T0 - timedelta(minutes=1),
                              task_id=f"ahead-{ahead.pk}", trigger=RunTrigger.SCHEDULE,
                              status=RunStatus.RUNNING)  # fmt: skip
    make_scheduler("node-a", clock).step()
    assert JobRun.objects.get(job=held, scheduled_for=T0).status == RunStatus.BUFFERED
    assert JobRun.objects.get(job=preempting, scheduled_for=T0).status == RunStatus.BUFFERED
    asked = JobRun.objects.get(task_id=f"ahead-{preempting.pk}")
    assert asked.cancel_requested_by == "overlap policy cancel_other"
    assert JobRun.objects.get(task_id=f"ahead-{held.pk}").cancel_requested_at is None
