"""A job's active period, run limit, jitter and pause after failures, through the real planner,
store and ledger (stepped with ``django_cluster_cron.testing.run_due``, as a user's test would)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.utils.timezone import now as timezone_now

from django_cluster_cron import signals
from django_cluster_cron.core.slots import task_id_for
from django_cluster_cron.models import JobChange, JobDefinition, JobRun, RunStatus, RunTrigger
from django_cluster_cron.testing import assert_ran, ledger, run_due

pytestmark = pytest.mark.django_db(transaction=True)

UTC = timezone.utc
# The jobs below were "created" at 00:30 that day and run hourly.
CREATED = datetime(2026, 11, 24, 0, 30, tzinfo=UTC)


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 11, 24, hour, minute, second, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _memory_lease(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "memory"}


def hourly(name: str, **fields: Any) -> JobDefinition:
    job = JobDefinition(
        name=name,
        cron="0 * * * *",
        timezone="UTC",
        task=fields.pop("task", "tests.record"),
        args=fields.pop("args", [name]),
        catchup_policy=fields.pop("catchup_policy", "all"),
        catchup_window=fields.pop("catchup_window", timedelta(hours=12)),
        **fields,
    )
    job.full_clean()
    job.save()
    return as_if_saved_at(job, CREATED)


def as_if_saved_at(job: JobDefinition, when: datetime) -> JobDefinition:
    """A save that (re)starts the schedule puts the watermark at the database's *now*; move it to
    ``when`` of the test's day, with the first due time its own policies give."""
    due = job.timing().next_due_after(job.schedule, when)
    JobDefinition.all_objects.filter(pk=job.pk).update(last_scheduled_at=when, next_run_at=due)
    job.refresh_from_db()
    return job


# -- start and end ------------------------------------------------------------------------------


def test_nothing_is_owed_before_the_start_and_the_first_slot_is_the_start():
    job = hourly("starts at five", start_at=at(5))
    assert job.next_run_at == at(5)
    assert run_due(at(3, 0, 1)) == []
    [run] = run_due(at(5, 0, 1))
    # Catch-up "all" over 12 hours, yet 01:00-04:00 were never the job's: no runs, no misses.
    assert (run.scheduled_for, run.trigger, run.status) == (at(5), RunTrigger.SCHEDULE, "success")
    assert [r.scheduled_for for r in ledger(job)] == [at(5)]


def test_the_slot_at_the_end_runs_and_the_job_is_then_finished():
    job = hourly("ends at two", end_at=at(2))
    assert [r.scheduled_for for r in run_due(at(1, 0, 1))] == [at(1)]
    # Down from 01:30 to 04:00: the 02:00 slot is caught up, 03:00 and 04:00 do not exist.
    runs = run_due(at(4, 0, 1))
    assert [(r.scheduled_for, r.trigger) for r in runs] == [(at(2), RunTrigger.CATCHUP)]
    job.refresh_from_db()
    assert job.next_run_at is None  # the due index never returns it again
    assert job.finished_reason(at(4)) == "finished: its end (2026-11-24 02:00:00Z) has passed"
    assert run_due(at(6, 0, 1)) == []


# -- max runs -----------------------------------------------------------------------------------


def test_max_runs_stops_the_schedule_after_that_many_runs():
    job = hourly("twice", max_runs=2)
    run_due(at(1, 0, 1))
    run_due(at(2, 0, 1))
    assert run_due(at(3, 0, 1)) == []
    assert [r.scheduled_for for r in ledger(job)] == [at(1), at(2)]
    job.refresh_from_db()
    assert (job.scheduled_runs, job.next_run_at) == (2, None)
    assert job.finished_reason(at(3)) == "finished: ran 2 of 2 scheduled runs"


def test_a_limit_set_later_counts_the_ledgers_scheduled_runs_but_not_manual_ones():
    job = hourly("limited later")
    run_due(at(1, 0, 1))
    run_due(at(2, 0, 1))
    JobRun.objects.create(
        job=job,
        scheduled_for=at(2, 10),
        task_id=task_id_for(job.pk, at(2, 10)),
        trigger=RunTrigger.MANUAL,
        status=RunStatus.SUCCESS,
    )
    job.max_runs = 3
    job.full_clean()
    job.save()  # at 02:30: a new limit restarts the schedule from then
    assert job.scheduled_runs == 2
    as_if_saved_at(job, at(2, 30))
    assert [r.scheduled_for for r in run_due(at(3, 0, 1))] == [at(3)]
    assert run_due(at(4, 0, 1)) == []
    job.refresh_from_db()
    assert job.runs_exhausted


def test_a_catch_up_after_an_outage_stops_at_the_limit_too():
    job = hourly("three at most", max_runs=3)
    run_due(at(1, 0, 1))
    runs = run_due(at(6, 0, 1))  # 02:00-06:00 due at once, catch-up "all"
    assert [r.scheduled_for for r in runs] == [at(2), at(3)]
    assert len(ledger(job, status=RunStatus.SUCCESS)) == 3


# -- jitter -------------------------------------------------------------------------------------


def test_a_jittered_slot_runs_at_its_offset_and_keeps_its_slot_and_task_id():
    job = hourly("spread", jitter=1800)
    timing = job.timing()
    # The first hourly slot whose offset is at least 2 s (fixed by the job's id; almost always
    # the first one), so that "one second before it is due" is after the slot itself.
    slot = next(s for s in (at(h) for h in range(1, 12)) if timing.offset(s).total_seconds() >= 2)
    due = timing.due_at(slot)
    JobDefinition.all_objects.filter(pk=job.pk).update(
        last_scheduled_at=slot - timedelta(minutes=30), next_run_at=due
    )
    assert run_due(due - timedelta(seconds=1)) == []
    [run] = run_due(due)
    assert run.scheduled_for == slot
    assert run.task_id == task_id_for(job.pk, slot)
    assert run.trigger == RunTrigger.SCHEDULE  # on time: lateness counts from the due time
    job.refresh_from_db()
    assert job.next_run_at == timing.next_due_after(job.schedule, due)


def test_jitter_spreads_jobs_of_one_cron_and_each_runs_its_slot_once():
    jobs = [hourly(f"tenant {n}", jitter=600) for n in range(20)]
    dues = {job.pk: job.timing().due_at(at(1)) for job in jobs}
    assert len(set(dues.values())) > 10  # 20 jobs, 601 possible offsets
    recorded_at: dict[int, datetime] = {}
    for second in range(0, 631, 30):  # a leader ticking every 30 s through the spread
        now = at(1) + timedelta(seconds=second)
        for run in run_due(now):
            assert run.job_id not in recorded_at  # one run per slot
            recorded_at[run.job_id] = now
    for job in jobs:
        assert_ran(job, at=at(1))
        # Recorded at the first tick at or after its due time: never before it.
        assert dues[job.pk] <= recorded_at[job.pk] < dues[job.pk] + timedelta(seconds=30)


# -- pause after failures -----------------------------------------------------------------------


def test_repeated_failures_pause_the_job_with_a_note_a_history_entry_a_signal_and_a_log(caplog):
    job = hourly("always fails", task="tests.fail", args=[], pause_after_failures=2)
    heard: list[dict[str, Any]] = []

    def listener(sender: Any, **info: Any) -> None:
        heard.append(info)

    signals.job_auto_paused.connect(listener)
    try:
        with caplog.at_level(logging.WARNING, logger="django_cluster_cron.worker"):
            [first] = run_due(at(1, 0, 1))
            job.refresh_from_db()
            assert (first.status, job.enabled, job.consecutive_failures) == ("failed", True, 1)
            [second] = run_due(at(2, 0, 1))
    finally:
        signals.job_auto_paused.disconnect(listener)

    job.refresh_from_db()
    assert not job.enabled
    assert job.next_run_at is None
    note = f"paused after 2 failed runs in a row (runs {first.pk}, {second.pk})"
    assert job.pause_note == note
    change = JobChange.objects.filter(job=job).first()
    assert change is not None
    assert (change.action, change.via, change.actor) == (
        "paused",
        "policy",
        "policy: pause after failures",
    )
    assert change.changes["enabled"] == [True, False]
    assert note in change.note
    assert [(h["job"].pk, h["failures"], h["run_ids"]) for h in heard] == [
        (job.pk, 2, [second.pk, first.pk])
    ]
    assert f"job.auto_paused job={job.pk} failures=2 runs={first.pk}, {second.pk}" in caplog.text
    assert run_due(at(3, 0, 1)) == []  # paused: nothing more

    # The pause happened in the database; this instance took it in with refresh_from_db (above),
    # and its resume is a real resume: the count is cleared and the schedule restarts.
    job.resume()
    job.refresh_from_db()
    assert (job.enabled, job.consecutive_failures, job.pause_note) == (True, 0, "")
    assert job.next_run_at is not None


def test_a_success_resets_the_count_of_failures_in_a_row():
    job = hourly("flaky", task="tests.flaky", args=["flaky-label", 1], pause_after_failures=2)
    assert [r.status for r in run_due(at(1, 0, 1))] == ["failed"]
    assert [r.status for r in run_due(at(2, 0, 1))] == ["success"]
    job.refresh_from_db()
    assert (job.enabled, job.consecutive_failures) == (True, 0)


def test_without_the_policy_failures_are_not_even_counted():
    job = hourly("fails, never paused", task="tests.fail", args=[])
    for hour in (1, 2, 3):
        run_due(at(hour, 0, 1))
    job.refresh_from_db()
    assert (job.enabled, job.consecutive_failures) == (True, 0)


def _counted(job: JobDefinition) -> tuple[bool, int]:
    job.refresh_from_db()
    return job.enabled, job.consecutive_failures


def test_an_attempt_that_is_retried_does_not_count_only_the_failure_after_the_retries():
    from django_cluster_cron.celery_app import get_celery_app
    from django_cluster_cron.ledger.outbox import OutboxMessage
    from django_cluster_cron.worker.celery import deliver_here

    job = hourly("fails twice", task="tests.fail", args=[], max_retries=1, pause_after_failures=1)
    [run] = run_due(at(1, 0, 1))
    assert run.status == RunStatus.RETRYING
    assert _counted(job) == (True, 0)
    # Its last attempt, delivered as the worker would: failed for good, counted, paused.
    deliver_here(get_celery_app(), OutboxMessage.for_run(JobRun.objects.get(pk=run.pk)))
    run.refresh_from_db()
    assert (run.status, run.attempt) == (RunStatus.FAILED, 2)
    assert _counted(job) == (False, 1)


def test_a_cancelled_run_never_counts_as_a_failure():
    from django_cluster_cron import actions

    job = hourly("cancelled", task="tests.fail", args=[], pause_after_failures=1)
    [run] = run_due(at(1, 0, 1), execute=False)
    actions.cancel(run)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert _counted(job) == (True, 0)


def test_a_running_run_asked_to_stop_that_then_fails_never_counts_as_a_failure():
    from django_cluster_cron import actions
    from django_cluster_cron.dbtime import database_now
    from django_cluster_cron.ledger import statements
    from django_cluster_cron.worker.outcome import Delivery, Ending, Outcome, RunTimer
    from django_cluster_cron.worker.record import record

    job = hourly("asked", task="tests.fail", args=[], pause_after_failures=1, max_retries=2)
    [run] = run_due(at(1, 0, 1), execute=False)
    claimed = statements.claim_run(run.pk, run.task_id, run.attempt, "here:1")
    assert claimed is not None
    actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    failing = Outcome(Ending.FINAL, error=RuntimeError("stopped half way"))
    nowhere = Delivery(dispatcher=lambda: None)  # type: ignore[arg-type,return-value]
    written = record(nowhere, claimed, RunTimer(database_now()), failing)
    assert written == RunStatus.CANCELLED
    assert _counted(job) == (True, 0)


def test_a_run_terminated_by_a_revoke_never_counts_as_a_failure():
    from django_cluster_cron.ledger import statements, transitions

    job = hourly("terminated", task="tests.fail", args=[], pause_after_failures=1)
    [run] = run_due(at(1, 0, 1), execute=False)
    assert statements.claim_run(run.pk, run.task_id, run.attempt, "here:1") is not None
    status = transitions.discarded(
        run.pk, run.task_id, run.attempt, terminated=True, expired=False, signum=15
    )
    assert status == RunStatus.CANCELLED
    assert _counted(job) == (True, 0)


def test_a_skipped_run_never_counts_as_a_failure():
    job = hourly("ignores", task="tests.ignore", args=[], pause_after_failures=1)
    [run] = run_due(at(1, 0, 1))
    assert run.status == RunStatus.SKIPPED
    assert _counted(job) == (True, 0)


# -- what the operator sees before saving -------------------------------------------------------


def test_the_admin_preview_lists_the_jittered_runs_inside_the_period(admin_client):
    from django.urls import reverse

    from django_cluster_cron.core.timing import SlotTiming

    start = (timezone_now() + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    response = admin_client.get(
        reverse("admin:django_cluster_cron_job_preview"),
        {
            "cron": "0 * * * *",
            "timezone": "UTC",
            "start_at_0": f"{start:%Y-%m-%d}",
            "start_at_1": f"{start:%H:%M:%S}",
            "jitter": "900",
            "job": "4711",
        },
    )
    html = response.content.decode()
    timing = SlotTiming(start_at=start, jitter=timedelta(seconds=900), key=4711)
    first_slot = start
    first_due = timing.due_at(first_slot)
    assert f"Starts {start:%Y-%m-%d %H:%M:%S}" in html
    assert f"{first_due:%Y-%m-%d %H:%M:%S} UTC" in html
    assert f"slot {first_slot:%H:%M:%S} + {timing.offset(first_slot).seconds} s" in html
    # Nothing before the start.
    assert f"{start - timedelta(hours=1):%Y-%m-%d %H:%M}:00 UTC" not in html


def test_the_api_preview_gives_the_same_due_times_as_the_scheduler_will(admin_user):
    from rest_framework.test import APIClient

    from django_cluster_cron.core.cron import CronSchedule
    from django_cluster_cron.core.timing import SlotTiming

    api = APIClient()
    api.force_authenticate(admin_user)
    saved = JobDefinition(
        name="spread", cron="0 3 * * *", timezone="UTC", task="tests.echo", jitter=120
    )
    saved.full_clean()
    saved.save()
    # The saved job's jitter and id (its offsets depend on it), another schedule and zone.
    body = api.get(
        "/cron/api/preview/",
        {"cron": "*/5 * * * *", "timezone": "Europe/Berlin", "job": str(saved.pk), "count": "5"},
    ).json()
    timing = SlotTiming(jitter=timedelta(seconds=120), key=saved.pk)
    slots = [datetime.fromisoformat(s.replace("Z", "+00:00")) for s in body["slots"]]
    dues = [datetime.fromisoformat(d.replace("Z", "+00:00")) for d in body["fire_times"]]
    assert len(dues) == 5
    assert dues == sorted(dues)
    assert dues == [timing.due_at(slot) for slot in slots]
    schedule = CronSchedule.parse("*/5 * * * *", "Europe/Berlin")
    assert all(schedule.fire_times(slot - timedelta(seconds=1), 1) == [slot] for slot in slots)
