"""Migrating from django-celery-beat: `manage.py import_celery_beat`."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

pytest.importorskip(
    "django_celery_beat",
    reason="django-celery-beat is not installed: it requires Django < 6.1 (the "
    "from-celery-beat extra installs it wherever it resolves)",
)
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

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
    beat_task("every 7 min", interval=IntervalSchedule.objects.create(every=7, period="minutes"))
    beat_task("gone task", task="tests.vanished", crontab=nightly)
    beat_task("bad cron", crontab=CrontabSchedule.objects.create(minute="61", hour="*"))
    beat_task("once", crontab=nightly, one_off=True)
    beat_task("celery.backend_cleanup", task="celery.backend_cleanup", crontab=nightly)
    beat_task("ours", task="django_cluster_cron.execute_run", crontab=nightly)


def run(*args):
    out = io.StringIO()
    call_command("import_celery_beat", *args, stdout=out)
    return out.getvalue()


def test_a_dry_run_lists_what_it_would_create_and_why_it_skips_the_rest(beat):
    out = run()
    assert "would create nightly report: '30 2 * * 1-5' in Europe/Berlin -> tests.add" in out
    assert "would create every 15 s: '* * * * * */15' in UTC" in out
    assert "skip    every 7 min: every 7 minutes has no cron equivalent" in out
    assert "skip    gone task: not valid here: task: Task 'tests.vanished' is not registered" in out
    assert "skip    bad cron: not valid here: cron: minute field: '61'" in out
    assert "skip    once: one-off task" in out
    assert "skip    celery.backend_cleanup: Celery's own maintenance task" in out
    assert "skip    ours: 'django_cluster_cron.execute_run' is one of django-cluster-cron's" in out
    assert "Would create 2 job(s); skipped 6." in out
    assert not JobDefinition.objects.exists()


def test_apply_creates_validated_jobs_and_can_disable_the_beat_originals(beat):
    out = run("--apply", "--disable-imported")
    assert "Created 2 job(s); skipped 6." in out
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
    assert PeriodicTask.objects.get(name="every 7 min").enabled  # not imported: left alone
    again = run("--apply")
    assert "skip    nightly report: a job with this name already exists" in again
    assert JobDefinition.objects.count() == 2
