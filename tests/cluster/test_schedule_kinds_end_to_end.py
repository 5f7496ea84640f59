"""The schedule kinds beyond cron, end to end: a real `run_scheduler` leader and a real Celery
worker run an interval job (``@every``), a one-off (``@at``) and cron jobs whose date is
excluded (a date, and a public holiday), in one session.

The task bodies write to the witness table ``testapp.Execution``, independent of the run ledger.
The in-process tests (the scheduler on a controllable clock) are
tests/database/test_schedule_kinds.py; the pure schedules, tests/unit/test_schedule_kinds.py.
"""

from __future__ import annotations

import signal
from datetime import date, datetime, time, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from django_cluster_cron.models.runs import ACTIVE_STATUSES
from tests.support.timing import ttl_outlasting
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = [
    pytest.mark.any_database,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
]

UTC = dt_timezone.utc
INTERVAL = timedelta(seconds=3)
# How far ahead the one-off is written: writing it and the checks after, however stalled, must
# not reach it.
ONE_OFF_AHEAD = timedelta(seconds=round(ttl_outlasting(calls=8)))  # whole seconds, as @at is


def validated(name: str, **fields: Any) -> JobDefinition:
    """A job as the admin or the API would save it: ``full_clean()`` first. Its body is
    ``tests.record`` with the job's name as the witness label."""
    values: dict[str, Any] = {"timezone": "UTC", "task": "tests.record", "args": [name]}
    job = JobDefinition(name=name, **{**values, **fields})
    job.full_clean()
    job.save()
    return job


def midnight_after(day: date) -> datetime:
    return datetime.combine(day + timedelta(days=1), time(), tzinfo=UTC)


def clear_of_midnight() -> date:
    """Today's UTC date, with the session ahead of it on the same date: the excluded job's date
    is today's, and a session crossing midnight UTC would see tomorrow's slots run. Within two
    minutes of midnight, wait until it has passed."""
    now = timezone.now()
    if midnight_after(now.date()) - now < timedelta(minutes=2):
        tomorrow = now.date() + timedelta(days=1)
        wait_for(lambda: timezone.now().date() == tomorrow, 180, "midnight UTC", interval=1)
    return timezone.now().date()


def on_grid(instant: datetime, anchor: datetime) -> bool:
    return (instant - anchor) % INTERVAL == timedelta(0)


def runs_of(job: JobDefinition) -> list[JobRun]:
    return list(JobRun.objects.filter(job=job).order_by("scheduled_for"))


def test_interval_one_off_and_excluded_date_with_a_real_scheduler_and_worker(cluster):
    today = clear_of_midnight()
    cluster.worker("w1")
    cluster.start("leader")
    cluster.wait_ready("w1")
    cluster.wait_started("leader")

    now = timezone.now().replace(microsecond=0)
    # 2. The one-off first (the only job with a deadline to be written by), its instant in
    # whole seconds with an explicit Z.
    at = now + ONE_OFF_AHEAD
    once = validated("once", cron=f"@at {at:%Y-%m-%dT%H:%M:%S}Z")
    assert once.next_run_at == at
    assert once.finished_reason(timezone.now()) == ""
    # 1. An interval counted from a start a little in the past, off the epoch's 3 s grid so
    # that the anchor shows: its slots are start + k * 3 s, never a multiple of 3 s since 1970.
    start = now - timedelta(seconds=2)
    if on_grid(start, datetime(1970, 1, 1, tzinfo=UTC)):
        start -= timedelta(seconds=1)
    every = validated(
        "every-3s",
        cron="@every 3s",
        start_at=start,
        # A stalled pass on a loaded machine catches the slots up rather than missing them.
        catchup_policy="all",
        catchup_window=timedelta(minutes=5),
    )
    assert every.last_scheduled_at is not None
    # Owed from its save on: the first slot on its grid after the watermark the save set.
    first_slot = start + ((every.last_scheduled_at - start) // INTERVAL + 1) * INTERVAL
    assert every.next_run_at == first_slot
    # 3. Every 2 seconds (the 6th field is the seconds), but not today: nothing until tomorrow.
    excluded = validated("not-today", cron="* * * * * */2", exclusions=[today.isoformat()])
    tomorrow = midnight_after(today)
    assert excluded.next_run_at == tomorrow, (excluded.last_scheduled_at, excluded.exclusions)
    # 3'. The same rule read by the scheduler itself: a job whose leader has been away since
    # just before midnight (its bookkeeping as such an outage leaves it) is owed yesterday's
    # last two slots, 23:58 and 23:59, and then nothing but today's, which are excluded.
    midnight = midnight_after(today - timedelta(days=1))
    owed = validated(
        "back-from-yesterday",
        cron="* * * * *",
        exclusions=[today.isoformat()],
        catchup_policy="all",
        catchup_window=timedelta(days=2),
    )
    assert owed.next_run_at == tomorrow
    JobDefinition.objects.filter(pk=owed.pk).update(
        last_scheduled_at=midnight - timedelta(seconds=150),
        next_run_at=midnight - timedelta(seconds=120),
    )
    yesterdays = [midnight - timedelta(seconds=120), midnight - timedelta(seconds=60)]
    # 4. A public holiday, read by the scheduler: noon on December 24-26 (UTC) except US public
    # holidays, its leader away since the last such week began. It is owed the 24th and the
    # 26th; Christmas Day is not a slot (neither run nor recorded missed), and the next slot is
    # next year's 24th.
    christmas_year = today.year if today >= date(today.year, 12, 27) else today.year - 1
    eve = datetime(christmas_year, 12, 24, 12, tzinfo=UTC)
    holiday_week = validated(
        "christmas-week",
        cron="0 12 24-26 12 *",
        exclusions=["holidays:US"],
        catchup_policy="all",
        catchup_window=now - eve + timedelta(days=2),
    )
    JobDefinition.objects.filter(pk=holiday_week.pk).update(
        last_scheduled_at=eve - timedelta(hours=23), next_run_at=eve
    )
    holiday_slots = [eve, eve + timedelta(days=2)]

    # The session goes on until an interval slot two intervals past the one-off's instant has
    # run, every earlier slot of it too: the leader made passes well after the one-off was due
    # (a second run of it would be recorded by then), and for seconds beside the excluded job.
    target = first_slot
    while target < at + 2 * INTERVAL:
        target += INTERVAL

    def interval_done_through_target() -> bool:
        done = [r for r in runs_of(every) if r.scheduled_for <= target]
        return (
            bool(done)
            and done[-1].scheduled_for == target
            and all(r.status == RunStatus.SUCCESS for r in done)
        )

    def state() -> str:
        runs = [r for job in (every, once, excluded, owed, holiday_week) for r in runs_of(job)]
        lines = [f"{r.job.name} {r.scheduled_for:%Y-%m-%d %H:%M:%S} {r.status}" for r in runs]
        return "\n".join([*lines, cluster.log("leader"), cluster.log("w1")])

    wait_for(
        lambda: (
            JobRun.objects.filter(
                job=owed, scheduled_for__in=yesterdays, status=RunStatus.SUCCESS
            ).count()
            == len(yesterdays)
        ),
        90,
        "yesterday's two owed slots to succeed",
        detail=state,
    )
    wait_for(
        lambda: (
            JobRun.objects.filter(
                job=holiday_week, scheduled_for__in=holiday_slots, status=RunStatus.SUCCESS
            ).count()
            == len(holiday_slots)
        ),
        90,
        "December 24th and 26th to be caught up",
        detail=state,
    )
    [once_run] = wait_for(
        lambda: [r for r in runs_of(once) if r.status == RunStatus.SUCCESS],
        90,
        "the one-off's run to succeed",
        detail=state,
    )
    wait_for(
        interval_done_through_target,
        90,
        f"the interval's slots through {target:%H:%M:%S} to succeed",
        detail=state,
    )

    # Stop the leader, then let the worker finish every run it was sent: what follows reads a
    # settled ledger, and a run sent at the last moment is counted too.
    leader = cluster.procs["leader"]
    leader.send_signal(signal.SIGTERM)
    assert leader.wait(30) == 0, cluster.log("leader")
    wait_for(
        lambda: not JobRun.objects.filter(publish_count__gt=0, status__in=ACTIVE_STATUSES).exists(),
        60,
        "the runs sent to finish",
        detail=state,
    )

    # 1. Interval: every recorded run (those sent and those recorded ahead) is on the grid
    # counted from start_at, one per slot, consecutive from the first slot owed.
    runs = runs_of(every)
    slots = [r.scheduled_for for r in runs]
    assert slots[0] == first_slot
    assert slots == [first_slot + k * INTERVAL for k in range(len(slots))], slots
    sent = [r for r in runs if r.publish_count > 0]
    assert [r.scheduled_for for r in sent] == slots[: len(sent)]
    assert sent[-1].scheduled_for >= target
    assert len(sent) >= 3
    for run in sent:
        assert run.status == RunStatus.SUCCESS, run
        assert run.trigger == RunTrigger.SCHEDULE, run
        assert run.attempt == 1, run
        assert run.started_at is not None
        assert run.started_at >= run.scheduled_for, run
    assert all(r.status == RunStatus.PENDING for r in runs[len(sent) :])
    # One body per slot sent, and no more.
    assert Execution.objects.filter(label="every-3s").count() == len(sent)

    # 2. One-off: one run, at its instant, succeeded; then the job is finished.
    assert runs_of(once) == [once_run]
    assert once_run.scheduled_for == at
    assert once_run.trigger == RunTrigger.SCHEDULE
    assert once_run.started_at is not None
    assert once_run.started_at >= at
    assert Execution.objects.filter(label="once").count() == 1
    once = JobDefinition.objects.get(pk=once.pk)
    assert once.next_run_at is None
    assert once.finished_reason(timezone.now()) == (
        f"finished: its one run was due at {at:%Y-%m-%d %H:%M:%S}Z"
    )

    # 3. Excluded today: not a run recorded, not a body run, in all the slots that came and
    # went while the leader scheduled the other two; next due at tomorrow's first slot.
    assert not JobRun.objects.filter(job=excluded).exists()
    assert not Execution.objects.filter(label="not-today").exists()
    excluded.refresh_from_db()
    assert excluded.next_run_at == tomorrow
    assert excluded.finished_reason(timezone.now()) == ""
    # 3'. Caught up: yesterday's two slots ran, late; not one of today's was recorded, and the
    # leader's bookkeeping goes on at tomorrow's first slot.
    caught_up = runs_of(owed)
    assert [r.scheduled_for for r in caught_up] == yesterdays
    for run in caught_up:
        assert run.status == RunStatus.SUCCESS, run
        assert run.trigger == RunTrigger.CATCHUP, run
    assert Execution.objects.filter(label="back-from-yesterday").count() == 2
    owed.refresh_from_db()
    assert owed.next_run_at == tomorrow
    # 4. Christmas Day (a US public holiday) left out of the catch-up: no row at all.
    caught_up = runs_of(holiday_week)
    assert [r.scheduled_for for r in caught_up] == holiday_slots
    assert all(r.status == RunStatus.SUCCESS for r in caught_up), caught_up
    assert all(r.trigger == RunTrigger.CATCHUP for r in caught_up), caught_up
    assert Execution.objects.filter(label="christmas-week").count() == 2
    holiday_week.refresh_from_db()
    assert holiday_week.next_run_at == datetime(christmas_year + 1, 12, 24, 12, tzinfo=UTC)


def test_public_holidays_exclude_dates_from_a_schedule():
    # Next year's dates: deterministic whatever today is. In Bavaria the 25th and 26th of
    # December are public holidays (Christmas Day, Second Day of Christmas), the 23rd is not.
    year = timezone.now().year + 1
    rules = ["holidays:DE-BY"]
    on_christmas = JobDefinition(
        name="on-christmas",
        cron=f"@at {year}-12-25T12:00",
        timezone="Europe/Berlin",
        task="tests.add",
        exclusions=rules,
    )
    with pytest.raises(ValidationError) as refused:
        on_christmas.full_clean()
    assert "would never run" in refused.value.message_dict["exclusions"][0]

    before = validated(
        "before-christmas",
        cron=f"@at {year}-12-23T12:00",
        timezone="Europe/Berlin",
        exclusions=rules,
    )
    assert before.next_run_at == datetime(year, 12, 23, 11, tzinfo=UTC)  # 12:00 CET

    # 25th to 27th at noon: the two holidays are skipped, the 27th is the next slot.
    around = validated(
        "around-christmas",
        cron="0 12 25-27 12 *",
        timezone="Europe/Berlin",
        start_at=datetime(year, 1, 1, tzinfo=UTC),
        exclusions=rules,
    )
    assert around.next_run_at == datetime(year, 12, 27, 11, tzinfo=UTC)
