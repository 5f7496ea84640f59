"""Migrating from django-celery-beat: `manage.py import_celery_beat`."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

pytest.importorskip(
    "django_celery_beat",
    reason="django-celery-beat is not installed: it requires Django < 6.1 (the "
    "from-celery-beat extra installs it wherever it resolves)",
)
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)
from django_celery_beat.schedulers import ModelEntry

from django_cluster_cron.models import JobDefinition

pytestmark = pytest.mark.django_db


def beat_task(name, task="tests.add", **schedule):
    return PeriodicTask.objects.create(name=name, task=task, args=json.dumps([1, 2]), **schedule)


@pytest.fixture
def beat():
    nightly = CrontabSchedule.objects.create(
        minute="30", hour="2", day_of_week="1-5", timezone="Europe/Berlin"
    )
    beat_task("nightly report", crontab=nightly, queue="reports", priority=5, expire_seconds=600)
    beat_task("every 15 s", interval=IntervalSchedule.objects.create(every=15, period="seconds"))
    beat_task(
        "every 7 min",
        interval=IntervalSchedule.objects.create(every=7, period="minutes"),
        last_run_at=timezone.now() - timedelta(minutes=2),
    )
    beat_task(
        "every 500 ms",
        interval=IntervalSchedule.objects.create(every=500_000, period="microseconds"),
    )
    beat_task("gone task", task="tests.vanished", crontab=nightly)
    beat_task("bad cron", crontab=CrontabSchedule.objects.create(minute="61", hour="*"))
    beat_task("once", crontab=nightly, one_off=True)
    soon = ClockedSchedule.objects.create(clocked_time=timezone.now() + timedelta(hours=1))
    beat_task("clocked", clocked=soon, one_off=True)
    past = ClockedSchedule.objects.create(clocked_time=timezone.now() - timedelta(hours=1))
    beat_task("clocked and done", clocked=past, one_off=True, total_run_count=1, enabled=False)
    sunrise = SolarSchedule.objects.create(event="sunrise", latitude=48.1, longitude=11.6)
    beat_task("sunrise", solar=sunrise)
    beat_task("celery.backend_cleanup", task="celery.backend_cleanup", crontab=nightly)
    beat_task("ours", task="django_cluster_cron.execute_run", crontab=nightly)


def run(*args):
    out = io.StringIO()
    call_command("import_celery_beat", *args, stdout=out)
    return out.getvalue()


def test_a_dry_run_lists_what_it_would_create_and_why_it_skips_the_rest(beat):
    out = run()
    assert "would create nightly report: '30 2 * * 1-5' in Europe/Berlin -> tests.add" in out
    assert "would create every 15 s: '@every 15s' in UTC -> tests.add [counted from its last" in out
    assert (
        "would create every 7 min: '@every 7m' in UTC -> tests.add [counted from its last run"
        in (out)
    )
    assert (
        "skip    every 500 ms: every 500000 microseconds: intervals here are whole seconds" in out
    )
    assert (
        "would create once: '30 2 * * 1-5' in Europe/Berlin -> tests.add [one-off: max_runs 1]"
        in (out)
    )
    assert "would create clocked: '@at 20" in out
    assert "skip    clocked and done: clocked at " in out
    assert "would create sunrise: '@solar sunrise 48.1 11.6' in UTC -> tests.add" in out
    assert "skip    gone task: not valid here: task: Task 'tests.vanished' is not registered" in out
    assert "skip    bad cron: not valid here: cron: minute field: '61'" in out
    assert "skip    celery.backend_cleanup: Celery's own maintenance task" in out
    assert "skip    ours: 'django_cluster_cron.execute_run' is one of django-cluster-cron's" in out
    assert "Would create 6 job(s); skipped 6." in out
    assert not JobDefinition.objects.exists()


def test_apply_creates_validated_jobs_and_can_disable_the_beat_originals(beat):
    out = run("--apply", "--disable-imported")
    assert "Created 6 job(s); skipped 6." in out
    job = JobDefinition.objects.get(name="nightly report")
    assert (job.cron, job.timezone, job.task, job.args) == (
        "30 2 * * 1-5",
        "Europe/Berlin",
        "tests.add",
        [1, 2],
    )
    assert (job.queue, job.priority, job.expires) == ("reports", 5, 600)
    assert job.next_run_at is not None
    [created] = job.changes.all()  # its history says where it came from
    assert (created.action, created.via, created.actor) == (
        "created",
        "import",
        "import_celery_beat",
    )
    assert "periodic task 'nightly report'" in created.note
    assert not PeriodicTask.objects.get(name="nightly report").enabled
    assert PeriodicTask.objects.get(name="gone task").enabled  # not imported: left alone
    assert JobDefinition.objects.get(name="once").max_runs == 1
    again = run("--apply")
    assert "skip    nightly report: a job with this name already exists" in again
    assert JobDefinition.objects.count() == 6


def beat_next(task: PeriodicTask, now: datetime) -> datetime:
    """When django-celery-beat's own scheduler entry would next run ``task``, seen at ``now``."""
    from celery import current_app

    entry = ModelEntry(task, app=current_app)
    schedule = entry.schedule
    schedule.nowfun = lambda: now
    found: datetime = now + schedule.remaining_estimate(entry.last_run_at)
    return found


def test_the_next_fire_times_agree_with_django_celery_beats_own_schedules():
    """One task of each kind beat has, imported: our next fire time is the one beat's own
    schedule objects decide (to the second: ours are whole seconds), and the cadence after it
    goes on at beat's interval."""
    now = timezone.now()
    berlin = CrontabSchedule.objects.create(minute="15", hour="4", timezone="Europe/Berlin")
    tasks = [
        beat_task("cron", crontab=berlin),
        beat_task(
            "seven minutes",
            interval=IntervalSchedule.objects.create(every=7, period="minutes"),
            last_run_at=now - timedelta(minutes=2, seconds=13),
        ),
        beat_task(
            "ninety seconds, never run",
            interval=IntervalSchedule.objects.create(every=90, period="seconds"),
        ),
        beat_task(
            "36 hours from a start",
            interval=IntervalSchedule.objects.create(every=36, period="hours"),
            start_time=now + timedelta(hours=5, minutes=3),
        ),
        beat_task(
            "clocked",
            clocked=ClockedSchedule.objects.create(
                clocked_time=(now + timedelta(minutes=1)).replace(microsecond=0)
            ),
            one_off=True,
        ),
        beat_task("one-off crontab", crontab=berlin, one_off=True),
        beat_task(
            "dusk",
            solar=SolarSchedule.objects.create(
                event="dusk_nautical", latitude="-33.868800", longitude="151.209300"
            ),
        ),
    ]
    run("--apply")
    now = timezone.now()
    for task in tasks:
        task.refresh_from_db()
        job = JobDefinition.objects.get(name=task.name)
        ours = job.timing().next_due_after(job.schedule, now)
        theirs = beat_next(task, now)
        if task.start_time is not None:
            theirs = max(theirs, task.start_time)  # beat holds the task until its start
        theirs = theirs.replace(microsecond=0)
        assert ours == theirs, task.name
        if task.interval is not None:
            step = timedelta(**{task.interval.period: task.interval.every})
            assert job.schedule.fire_times(now, 3)[1:] == [ours + step, ours + 2 * step]
