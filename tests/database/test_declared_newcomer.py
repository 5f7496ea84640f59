"""Jobs declared in code as a new project meets them: a crontab() read in Celery's zone, errors
named by the key the user wrote, each left-out declaration reported once by sync_jobs, and no
job taken for removed by a settings module that does not declare the project's jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command

from django_cluster_cron.checks import check_settings
from django_cluster_cron.declared import cron, forget_decorated
from django_cluster_cron.declared.sync import REMOVED_NOTE, sync
from django_cluster_cron.models import JobDefinition

pytestmark = pytest.mark.django_db(transaction=True)

NIGHTLY = {"task": "tests.echo", "schedule": "0 3 * * *", "timezone": "Europe/Berlin"}


@pytest.fixture(autouse=True)
def _no_decorated():
    forget_decorated()
    yield
    forget_decorated()


def declare(settings, **jobs):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "JOBS": jobs}


def without_jobs(settings):
    """A settings module that does not mention JOBS (a one-off settings file)."""
    settings.CLUSTER_CRON = {k: v for k, v in settings.CLUSTER_CRON.items() if k != "JOBS"}


def run_sync_jobs(*args):
    out, err = StringIO(), StringIO()
    code = 0
    try:
        call_command("sync_jobs", *args, stdout=out, stderr=err)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


# -- a celery crontab() is read in Celery's zone ---------------------------------------------------


def test_import_from_settings_keeps_celery_timezone_and_says_which_zone(settings):
    from celery.schedules import crontab

    settings.CELERY_TIMEZONE = "Europe/Berlin"
    settings.CELERY_BEAT_SCHEDULE = {
        "nightly": {"task": "tests.echo", "schedule": crontab(minute=0, hour=3)},
        "often": {"task": "tests.echo", "schedule": 300},
    }
    out = StringIO()
    call_command("import_celery_beat", "--from-settings", stdout=out)
    text = out.getvalue()
    assert "declare nightly: '0 3 * * *' in Europe/Berlin -> tests.echo" in text
    assert (
        "A crontab() is read in Europe/Berlin, the zone Celery runs it in (the Celery app's "
        "timezone, CELERY_TIMEZONE)" in text
    )
    namespace: dict[str, object] = {"CLUSTER_CRON": {}}
    exec(text[text.index('CLUSTER_CRON["JOBS"]') :], namespace)
    jobs = namespace["CLUSTER_CRON"]["JOBS"]  # type: ignore[index]
    assert jobs["nightly"]["timezone"] == "Europe/Berlin"
    assert "timezone" not in jobs["often"]  # an interval is the same in every zone
    declare(settings, **jobs)
    sync()
    job = JobDefinition.objects.get(name="nightly")
    assert job.timezone == "Europe/Berlin"
    assert job.next_run_at.astimezone(job.schedule.zone).hour == 3


def test_a_crontab_declared_in_jobs_runs_in_celerys_zone_unless_the_entry_names_one(settings):
    from celery.schedules import crontab

    settings.CELERY_TIMEZONE = "Europe/Berlin"
    declare(
        settings,
        berlin={"task": "tests.echo", "schedule": crontab(minute=0, hour=3)},
        tokyo={
            "task": "tests.echo",
            "schedule": crontab(minute=0, hour=3),
            "timezone": "Asia/Tokyo",
        },
        text={"task": "tests.echo", "schedule": "0 3 * * *"},
    )
    sync()
    zones = dict(JobDefinition.objects.values_list("name", "timezone"))
    assert zones == {"berlin": "Europe/Berlin", "tokyo": "Asia/Tokyo", "text": "UTC"}


def test_without_celery_timezone_a_crontab_is_read_in_djangos_time_zone_as_celery_does(settings):
    from celery.schedules import crontab

    settings.CELERY_TIMEZONE = None
    settings.TIME_ZONE = "Asia/Tokyo"  # what Celery falls back to under Django
    settings.CELERY_BEAT_SCHEDULE = {"nightly": {"task": "tests.echo", "schedule": crontab(0, 3)}}
    out = StringIO()
    call_command("import_celery_beat", "--from-settings", stdout=out)
    assert "declare nightly: '0 3 * * *' in Asia/Tokyo -> tests.echo" in out.getvalue()
    assert (
        "A crontab() is read in Asia/Tokyo, the zone Celery runs it in (the Celery app's "
        "timezone: Django's TIME_ZONE, CELERY_TIMEZONE is not set)" in out.getvalue()
    )


# -- errors name the key the user wrote ------------------------------------------------------------


def test_a_bad_schedule_is_reported_under_schedule_the_key_declared(settings):
    from celery import shared_task

    declare(settings, broken={**NIGHTLY, "schedule": "61 * * * *"})

    @cron("0 3 * * 8")
    @shared_task(name="tests.declared_bad_day")
    def bad_day() -> None:
        pass

    messages = sorted(m.msg for m in check_settings())
    assert len(messages) == 2
    assert (
        "Declared job 'broken' (settings CLUSTER_CRON['JOBS']['broken']): schedule: minute"
        in (messages[0])
    )
    assert "Declared job 'tests.declared_bad_day'" in messages[1]
    assert ": schedule: day-of-week field: '8'" in messages[1]
    code, out, _ = run_sync_jobs()
    assert code == 1
    assert "invalid   broken (schedule: minute field: '61'" in out
    assert "cron:" not in out


def test_a_cron_key_in_jobs_is_refused_with_the_key_to_use(settings):
    declare(settings, odd={"task": "tests.echo", "cron": "0 3 * * *"})
    [message] = check_settings()
    assert message.id == "cluster_cron.W004"
    assert "cron: 'cron' is declared as 'schedule' here" in message.msg


# -- sync_jobs says each problem once ------------------------------------------------------------


def test_sync_jobs_reports_each_left_out_declaration_once(django_subprocess_env):
    jobs = {"nightly": NIGHTLY, "broken": {**NIGHTLY, "schedule": "61 * * * *"}}
    env = {**django_subprocess_env, "TEST_CLUSTER_CRON": json.dumps({"JOBS": jobs})}
    done = subprocess.run(
        [sys.executable, "-m", "django", "sync_jobs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    said = done.stdout + done.stderr
    assert said.count("minute field: '61'") == 1, said
    assert "invalid   broken (schedule: minute field: '61'" in done.stdout
    assert "1 declaration(s) left out, fix them and sync again: broken" in done.stderr
    assert JobDefinition.objects.filter(name="nightly").exists()


# -- a sync under settings that do not declare the jobs disables none of them ----------------------


def test_migrate_under_settings_without_jobs_disables_no_declared_job(settings, capsys):
    declare(settings, nightly=NIGHTLY, hourly={**NIGHTLY, "schedule": "0 * * * *"})
    sync()
    without_jobs(settings)
    call_command("migrate", verbosity=1, stdout=StringIO())
    printed = capsys.readouterr().out
    assert list(JobDefinition.objects.filter(enabled=False)) == []
    assert "cluster-cron: kept      hourly (declared in settings CLUSTER_CRON['JOBS'], which" in (
        printed
    )
    assert "these settings do not set: not disabled as removed from code" in printed
    assert "disable   " not in printed


def test_sync_jobs_under_settings_without_jobs_says_what_it_kept_and_exits_zero(settings):
    declare(settings, nightly=NIGHTLY)
    sync()
    without_jobs(settings)
    code, out, _ = run_sync_jobs()
    assert code == 0, out
    assert "kept      nightly (declared in settings CLUSTER_CRON['JOBS']" in out
    assert "Set CLUSTER_CRON['JOBS'] (to {} if it declares none) for a sync to disable" in out
    assert "Done: 1 kept." in out
    assert JobDefinition.objects.get(name="nightly").enabled is True


def test_sync_jobs_still_disables_the_jobs_really_removed(settings):
    declare(settings, nightly=NIGHTLY, hourly={**NIGHTLY, "schedule": "0 * * * *"})
    sync()
    declare(settings, hourly={**NIGHTLY, "schedule": "0 * * * *"})
    code, out, _ = run_sync_jobs()
    assert code == 0, out
    assert "disable   nightly" in out
    declare(settings)  # JOBS = {}: this project declares no job in settings any more
    assert "disable   hourly" in run_sync_jobs()[1]
    states = dict(JobDefinition.objects.values_list("name", "pause_note"))
    assert all(note.startswith(REMOVED_NOTE) for note in states.values()), states


def test_a_decorated_job_is_disabled_only_if_the_module_that_declared_it_was_read(settings):
    """A row synced from ``@cron`` names its module: it is taken for removed when that module
    was imported here and no longer declares it, or is gone; not when these settings simply do
    not import it."""
    import importlib.util

    assert "tests.testapp.unimported" not in sys.modules
    assert importlib.util.find_spec("tests.testapp.unimported") is not None
    declare(settings)
    for name, origin in [
        ("elsewhere", "tests.testapp.unimported:12"),  # a module not imported here
        ("moved-out", f"{__name__}:40"),  # this module, imported, declares it no more
        ("deleted", "tests.testapp.no_such_module:3"),  # a module that is gone
    ]:
        job = JobDefinition(name=name, cron="0 3 * * *", timezone="UTC", task="tests.echo")
        job.source, job.code_origin = "code", origin
        job.full_clean()
        job.save()
    actions = {change.name: (change.action, change.reason) for change in sync().changes}
    assert actions["moved-out"] == ("disable", "")
    assert actions["deleted"] == ("disable", "")
    assert actions["elsewhere"][0] == "kept"
    assert (
        "in tests.testapp.unimported, a module not imported under these settings"
        in (actions["elsewhere"][1])
    )
    assert JobDefinition.objects.get(name="elsewhere").enabled is True
