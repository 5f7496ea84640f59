"""Jobs declared in code: validation at check time, sync_jobs, rolling deploys, the admin."""

from __future__ import annotations

import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_cluster_cron.checks import check_settings
from django_cluster_cron.declared import cron, declarations, forget_decorated
from django_cluster_cron.declared.sync import REMOVED_NOTE, sync
from django_cluster_cron.models import JobDefinition

pytestmark = pytest.mark.django_db(transaction=True)

NIGHTLY = {
    "task": "tests.add",
    "schedule": "0 3 * * *",
    "timezone": "Europe/Berlin",
    "args": [1, 2],
}


@pytest.fixture(autouse=True)
def _no_decorated():
    forget_decorated()
    yield
    forget_decorated()


def declare(settings, version=None, **jobs):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "JOBS": jobs, "JOBS_VERSION": version}


def run_sync_jobs(*args):
    out = StringIO()
    code = 0
    try:
        call_command("sync_jobs", *args, stdout=out)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue()


def test_a_declared_job_is_created_with_where_it_comes_from(settings):
    declare(settings, **{"nightly-report": {**NIGHTLY, "options": {"queue": "reports"}}})
    code, out = run_sync_jobs("--dry-run")
    assert code == 0
    assert "create    nightly-report" in out
    assert not JobDefinition.objects.exists()  # a dry run changes nothing
    code, out = run_sync_jobs()
    assert code == 0, out
    job = JobDefinition.objects.get(name="nightly-report")
    assert (job.source, job.cron, job.timezone, job.queue) == (
        "code",
        "0 3 * * *",
        "Europe/Berlin",
        "reports",
    )
    assert job.code_origin == "settings CLUSTER_CRON['JOBS']['nightly-report']"
    assert job.next_run_at is not None
    assert "unchanged nightly-report" in run_sync_jobs()[1]


def test_the_decorator_declares_a_job_next_to_its_task(settings):
    from celery import shared_task

    @cron("*/5 * * * *", max_retries=2, catchup_window=600)
    @shared_task(name="tests.declared_example")
    def example() -> None:
        pass

    [declared] = declarations(import_tasks=False)
    assert declared.name == "tests.declared_example"
    assert declared.origin.startswith("tests.database.test_declared:")
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON}
    sync()
    job = JobDefinition.objects.get(name="tests.declared_example")
    assert (job.task, job.max_retries, job.catchup_window) == (
        "tests.declared_example",
        2,
        timedelta(minutes=10),
    )


def test_a_changed_declaration_updates_the_row_and_a_new_schedule_restarts_it(settings):
    declare(settings, nightly=NIGHTLY)
    sync()
    before = JobDefinition.objects.get(name="nightly")
    declare(settings, nightly={**NIGHTLY, "schedule": "0 4 * * *", "max_retries": 3})
    result = sync()
    [change] = result.changes
    assert change.action == "update"
    assert change.fields["cron"] == ("0 3 * * *", "0 4 * * *")
    job = JobDefinition.objects.get(name="nightly")
    assert (job.cron, job.max_retries, job.pk) == ("0 4 * * *", 3, before.pk)
    assert job.next_run_at.astimezone(job.schedule.zone).hour == 4


def test_a_removed_declaration_disables_the_job_and_keeps_it_and_its_return_enables_it(settings):
    declare(settings, nightly=NIGHTLY)
    sync()
    declare(settings)
    assert [c.action for c in sync().changes] == ["disable"]
    job = JobDefinition.objects.get(name="nightly")
    assert job.enabled is False
    assert job.pause_note.startswith(REMOVED_NOTE)
    assert job.deleted_at is None
    declare(settings, nightly=NIGHTLY)
    assert [c.action for c in sync().changes] == ["enable"]
    job.refresh_from_db()
    assert (job.enabled, job.pause_note) == (True, "")


def test_an_operators_pause_survives_a_sync(settings):
    declare(settings, nightly=NIGHTLY)
    sync()
    JobDefinition.objects.get(name="nightly").pause("waiting for the new index")
    assert [c.action for c in sync().changes] == ["unchanged"]
    job = JobDefinition.objects.get(name="nightly")
    assert (job.enabled, job.pause_note) == (False, "waiting for the new index")


def test_a_job_made_in_the_admin_with_a_declared_name_is_a_conflict_left_alone(settings):
    admin_made = JobDefinition(name="nightly", cron="0 1 * * *", timezone="UTC", task="tests.add")
    admin_made.full_clean()
    admin_made.save()
    declare(settings, nightly=NIGHTLY)
    code, out = run_sync_jobs()
    assert code == 1
    assert "conflict  nightly" in out
    admin_made.refresh_from_db()
    assert (admin_made.source, admin_made.cron) == ("admin", "0 1 * * *")


def test_an_invalid_declaration_is_a_check_error_naming_the_job_and_field_and_is_not_synced(
    settings,
):
    declare(settings, broken={**NIGHTLY, "schedule": "61 * * * *"})
    errors = [m for m in check_settings() if m.id == "cluster_cron.E009"]
    assert len(errors) == 1
    assert "'broken'" in errors[0].msg
    assert "cron: minute field" in errors[0].msg
    code, out = run_sync_jobs()
    assert code == 1
    assert "invalid   broken" in out
    assert not JobDefinition.objects.exists()


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({**NIGHTLY, "enabled": False}, "'enabled' cannot be declared: operators own it"),
        ({**NIGHTLY, "colour": "blue"}, "'colour' cannot be declared: not a job field"),
        ({"task": "tests.add"}, "needs at least 'task' and 'schedule'"),
        ({**NIGHTLY, "schedule": timedelta(minutes=5)}, "'schedule' must be a cron expression"),
        ({**NIGHTLY, "options": {"routing_key": "x"}}, "option 'routing_key' is not supported"),
    ],
)
def test_a_declaration_that_cannot_be_read_is_e008(settings, entry, words):
    declare(settings, odd=entry)
    [error] = [m for m in check_settings() if m.id == "cluster_cron.E008"]
    assert words in error.msg
    assert "['odd']" in error.msg


def test_a_celery_crontab_is_read_as_its_cron_expression(settings):
    from celery.schedules import crontab

    declare(settings, weekly={**NIGHTLY, "schedule": crontab(minute=15, hour=7, day_of_week="mon")})
    sync()
    assert JobDefinition.objects.get(name="weekly").cron == "15 7 * * mon"


def test_two_releases_syncing_in_turn_do_not_undo_each_other(settings):
    """A rolling deploy: hosts of release 2 and of release 1 sync alternately."""
    old = {"nightly": NIGHTLY}
    new = {
        "nightly": {**NIGHTLY, "schedule": "0 5 * * *"},
        "hourly": {**NIGHTLY, "schedule": "0 * * * *"},
    }
    declare(settings, version=2, **new)
    assert sync().applied
    for _ in range(3):
        declare(settings, version=1, **old)
        skipped = sync()
        assert not skipped.applied
        assert "version 1, the database has 2" in skipped.skipped
        declare(settings, version=2, **new)
        assert all(c.action == "unchanged" for c in sync().changes)
    assert JobDefinition.objects.get(name="nightly").cron == "0 5 * * *"
    assert JobDefinition.objects.get(name="hourly").enabled is True


def test_concurrent_syncs_run_one_after_another_and_create_each_job_once(settings):
    declare(settings, version=7, **{f"job-{i}": NIGHTLY for i in range(5)})
    errors: list[BaseException] = []

    def one() -> None:
        from django.db import connection

        try:
            sync(by=threading.current_thread().name)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, name=f"host-{i}") for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert JobDefinition.objects.filter(source="code").count() == 5


def test_after_migrate_the_declared_jobs_are_synced(settings):
    from django.apps import apps

    from django_cluster_cron.apps import _sync_after_migrate

    declare(settings, nightly=NIGHTLY)
    _sync_after_migrate(apps.get_app_config("django_cluster_cron"), verbosity=0)
    assert JobDefinition.objects.filter(name="nightly", source="code").exists()
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "SYNC_JOBS_ON_MIGRATE": False}
    declare(settings)
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "SYNC_JOBS_ON_MIGRATE": False}
    _sync_after_migrate(apps.get_app_config("django_cluster_cron"), verbosity=0)
    assert JobDefinition.objects.get(name="nightly").enabled is True  # not synced: off


def test_the_admin_shows_code_owned_fields_read_only_with_where_they_are_defined(
    settings, admin_client
):
    declare(settings, nightly=NIGHTLY)
    sync()
    job = JobDefinition.objects.get(name="nightly")
    url = reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    page = admin_client.get(url).content.decode()
    assert "code, at settings CLUSTER_CRON[&#x27;JOBS&#x27;][&#x27;nightly&#x27;]" in page
    assert 'name="cron"' not in page  # read-only: shown, not an input
    assert 'name="enabled"' in page  # operators still pause and resume


def test_celery_beat_schedule_from_settings_becomes_declarations_with_a_skip_report(settings):
    from celery.schedules import crontab

    class Solar:  # celery's solar() needs the ephem package: any non-cron schedule will do
        pass

    settings.CELERY_BEAT_SCHEDULE = {
        "every-5-min": {"task": "tests.add", "schedule": 300.0, "args": (1, 2)},
        "weekdays": {
            "task": "tests.echo",
            "schedule": crontab(minute=30, hour=9, day_of_week="1-5"),
            "kwargs": {"text": "hi"},
            "options": {"queue": "reports", "routing_key": "r"},
        },
        "every-7-s": {"task": "tests.add", "schedule": timedelta(seconds=7)},
        "sunrise": {"task": "tests.add", "schedule": Solar()},
        "cleanup": {"task": "celery.backend_cleanup", "schedule": crontab(minute=0, hour=4)},
        "bad-task": {"task": "nope.nothing", "schedule": 60},
    }
    out = StringIO()
    call_command("import_celery_beat", "--from-settings", stdout=out)
    text = out.getvalue()
    assert "declare every-5-min: '*/5 * * * *' -> tests.add [interval now aligned" in text
    assert "declare weekdays: '30 9 * * 1-5' -> tests.echo" in text
    assert "options not carried over: routing_key" in text
    assert "skip    every-7-s: every 7 s has no cron equivalent" in text
    assert "skip    sunrise: a Solar schedule has no cron equivalent" in text
    assert "skip    cleanup: Celery's own maintenance task" in text
    assert "skip    bad-task: not valid here: task:" in text
    assert "2 job(s) to declare; skipped 4" in text
    # What it prints is a CLUSTER_CRON["JOBS"] that declares and syncs as printed.
    namespace: dict[str, object] = {"CLUSTER_CRON": {}}
    exec(text[text.index('CLUSTER_CRON["JOBS"]') :], namespace)
    jobs = namespace["CLUSTER_CRON"]["JOBS"]  # type: ignore[index]
    declare(settings, **jobs)
    assert [c.action for c in sync().changes] == ["create", "create"]
    assert JobDefinition.objects.get(name="weekdays").queue == "reports"


def test_policies_are_declared_like_any_field_and_checked_like_the_admin(settings):
    declare(
        settings,
        **{
            "spread": {
                **NIGHTLY,
                "jitter": 300,
                "max_runs": 10,
                "pause_after_failures": 3,
            },
        },
    )
    assert run_sync_jobs()[0] == 0
    job = JobDefinition.objects.get(name="spread")
    assert (job.jitter, job.max_runs, job.pause_after_failures) == (300, 10, 3)

    declare(settings, **{"spread": {**NIGHTLY, "jitter": 99_999}})
    [error] = check_settings(None)
    assert error.id == "cluster_cron.E009"
    assert "spread" in error.msg
    assert "jitter" in error.msg
