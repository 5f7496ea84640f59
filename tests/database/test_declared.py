"""Jobs declared in code: validation at check time, sync_jobs, rolling deploys, the admin."""

from __future__ import annotations

import contextlib
import json
import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.core.checks import WARNING
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
    admin_made = JobDefinition(
        name="nightly", cron="0 1 * * *", timezone="UTC", task="tests.add", args=[1, 2]
    )
    admin_made.full_clean()
    admin_made.save()
    declare(settings, nightly=NIGHTLY)
    code, out = run_sync_jobs()
    assert code == 1
    assert "conflict  nightly" in out
    admin_made.refresh_from_db()
    assert (admin_made.source, admin_made.cron) == ("admin", "0 1 * * *")


def test_an_invalid_declaration_is_a_check_warning_naming_the_job_and_field_and_is_not_synced(
    settings,
):
    declare(settings, broken={**NIGHTLY, "schedule": "61 * * * *"})
    messages = check_settings()
    assert [m.id for m in messages] == ["cluster_cron.W005"]
    assert messages[0].level == WARNING  # an error would stop every command, so every job
    assert "'broken'" in messages[0].msg
    assert "schedule: minute field" in messages[0].msg
    code, out = run_sync_jobs()
    assert code == 1
    assert "invalid   broken (schedule: minute field: '61'" in out
    assert "Left out: no job created." in out
    assert not JobDefinition.objects.exists()


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({**NIGHTLY, "enabled": False}, "enabled: 'enabled' cannot be declared: operators own it"),
        ({**NIGHTLY, "colour": "blue"}, "colour: 'colour' cannot be declared: not a job field"),
        ({"task": "tests.add"}, "schedule: needs at least 'task' and 'schedule'"),
        ({**NIGHTLY, "schedule": timedelta(milliseconds=500)}, "intervals are whole seconds"),
        ({**NIGHTLY, "schedule": 300}, "'schedule' must be text"),
        ({**NIGHTLY, "options": {"routing_key": "x"}}, "option 'routing_key' is not supported"),
        ({**NIGHTLY, "options": "reports"}, "options: 'options' must be a dict"),
        ("0 3 * * *", "must be a dict of job fields, not str"),
    ],
)
def test_a_declaration_that_cannot_be_read_is_w004_and_the_others_still_sync(
    settings, entry, words
):
    declare(settings, odd=entry, nightly=NIGHTLY)
    messages = check_settings()
    assert [m.id for m in messages] == ["cluster_cron.W004"]
    assert words in messages[0].msg
    assert "['odd']" in messages[0].msg
    result = sync()
    assert {c.name: c.action for c in result.changes} == {"odd": "invalid", "nightly": "create"}
    assert words.split(": ", 1)[-1] in result.changes[0].reason
    assert list(JobDefinition.objects.values_list("name", flat=True)) == ["nightly"]


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
        "every-7-s": {"task": "tests.add", "schedule": timedelta(seconds=7), "args": (3, 4)},
        "half-second": {"task": "tests.add", "schedule": timedelta(seconds=0.5)},
        "sunrise": {"task": "tests.add", "schedule": Solar()},
        "cleanup": {"task": "celery.backend_cleanup", "schedule": crontab(minute=0, hour=4)},
        "bad-task": {"task": "nope.nothing", "schedule": 60},
    }
    out = StringIO()
    call_command("import_celery_beat", "--from-settings", stdout=out)
    text = out.getvalue()
    assert "declare every-5-min: '@every 5m' -> tests.add [interval counted from 1970" in text
    assert "declare weekdays: '30 9 * * 1-5' in UTC -> tests.echo" in text
    assert "options not carried over: routing_key" in text
    assert "declare every-7-s: '@every 7s' -> tests.add" in text
    assert "skip    half-second: a timedelta schedule: an interval of 0.5 s" in text
    assert "skip    sunrise: a Solar schedule: 'schedule' must be text" in text
    assert "skip    cleanup: Celery's own maintenance task" in text
    assert "skip    bad-task: not valid here: task:" in text
    assert "3 job(s) to declare; skipped 4" in text
    # What it prints is a CLUSTER_CRON["JOBS"] that declares and syncs as printed.
    namespace: dict[str, object] = {"CLUSTER_CRON": {}}
    exec(text[text.index('CLUSTER_CRON["JOBS"]') :], namespace)
    jobs = namespace["CLUSTER_CRON"]["JOBS"]  # type: ignore[index]
    declare(settings, **jobs)
    assert [c.action for c in sync().changes] == ["create", "create", "create"]
    assert JobDefinition.objects.get(name="every-7-s").cron == "@every 7s"
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
    [warning] = check_settings(None)
    assert warning.id == "cluster_cron.W005"
    assert "spread" in warning.msg
    assert "jitter" in warning.msg


# -- one bad declaration never stops the others -------------------------------------------------


def test_a_typo_in_one_declaration_does_not_stop_the_commands(settings):
    """The reproduction: one cron typo was an Error-level check, so every command that runs the
    checks (run_scheduler, migrate, cluster_health, sync_jobs) exited before doing anything."""
    declare(settings, nightly=NIGHTLY, broken={**NIGHTLY, "schedule": "61 * * * *"})
    err = StringIO()
    call_command("check", stdout=StringIO(), stderr=err)  # no SystemCheckError
    assert "cluster_cron.W005" in err.getvalue()
    code, out = run_sync_jobs()
    assert code == 1, out
    assert JobDefinition.objects.filter(name="nightly", source="code").exists()


@pytest.mark.parametrize("dry_run", [True, False])
def test_sync_jobs_syncs_the_valid_ones_names_the_bad_one_and_exits_one(settings, dry_run):
    declare(
        settings,
        nightly=NIGHTLY,
        hourly={**NIGHTLY, "schedule": "0 * * * *"},
        broken={**NIGHTLY, "schedule": "61 * * * *"},
    )
    out, err = StringIO(), StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("sync_jobs", *(["--dry-run"] if dry_run else []), stdout=out, stderr=err)
    assert exited.value.code == 1
    text = out.getvalue()
    assert "create    hourly" in text
    assert "create    nightly" in text
    assert "invalid   broken (schedule: minute field: '61' — 61 is out of range 0-59. " in text
    assert "Declared at settings CLUSTER_CRON['JOBS']['broken']. Left out: no job" in text
    assert "1 declaration(s) left out, fix them and sync again: broken" in err.getvalue()
    synced = set(JobDefinition.objects.values_list("name", flat=True))
    assert synced == (set() if dry_run else {"hourly", "nightly"})


def test_a_synced_job_whose_declaration_became_invalid_is_left_exactly_as_it_was(settings, caplog):
    declare(settings, nightly=NIGHTLY, hourly={**NIGHTLY, "schedule": "0 * * * *"})
    sync()
    before = JobDefinition.objects.filter(name="nightly").values().get()
    # The next release has a typo in one job and changes the other.
    declare(
        settings,
        nightly={**NIGHTLY, "schedule": "0 3 * * *x", "max_retries": 5},
        hourly={**NIGHTLY, "schedule": "30 * * * *"},
    )
    code, out = run_sync_jobs()
    assert code == 1
    assert "invalid   nightly (schedule:" in out
    assert "Left out: the job keeps its last synced definition." in out
    assert "update    hourly: cron '0 * * * *' -> '30 * * * *'" in out
    assert "disable" not in out
    # Not updated, not disabled, not deleted: the row is what the last good sync left.
    assert JobDefinition.objects.filter(name="nightly").values().get() == before
    assert JobDefinition.objects.get(name="hourly").cron == "30 * * * *"
    # sync_jobs printed it; a sync that prints nothing of its own (after migrate) logs it.
    with caplog.at_level("WARNING", logger="django_cluster_cron.sync"):
        sync(by="migrate")
    [logged] = [r.getMessage() for r in caplog.records if "declared.invalid" in r.getMessage()]
    assert logged.startswith("declared.invalid job=nightly by=migrate schedule:")
    # Fixed in the release after: synced as any change.
    declare(settings, nightly={**NIGHTLY, "max_retries": 5}, hourly={**NIGHTLY})
    assert {c.name: c.action for c in sync().changes} == {"nightly": "update", "hourly": "update"}
    assert JobDefinition.objects.get(name="nightly").max_retries == 5


@pytest.mark.parametrize(
    ("jobs", "name", "words"),
    [
        ({3: NIGHTLY}, "#2", "name: 3 is not a job name"),
        ({"": NIGHTLY}, "#2", "name: '' is not a job name"),
        ({"odd": {**NIGHTLY, "max_retries": "three"}}, "odd", "max_retries: “three” value must"),
        ({"odd": {**NIGHTLY, "args": "x"}}, "odd", "args: Arguments must be a JSON list"),
        ({"odd": {**NIGHTLY, "timezone": 5}}, "odd", "timezone: '5' is not a time zone name"),
        (
            {"odd": {**NIGHTLY, "catchup_window": "soon"}},
            "odd",
            "catchup_window: “soon” is not a duration",
        ),
        ({"odd": {**NIGHTLY, "schedule": None}}, "odd", "schedule: 'schedule' must be text"),
        ({"odd": {**NIGHTLY, "task": "nope.nothing"}}, "odd", "task: Task 'nope.nothing' is not"),
    ],
)
def test_a_malformed_entry_is_reported_on_its_entry_and_crashes_nothing(
    settings, jobs, name, words
):
    declare(settings)  # keys that are no names cannot be keywords: JOBS is set below
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "JOBS": {"ok": NIGHTLY, **jobs}}
    [warning] = check_settings()
    assert warning.level == WARNING
    assert f"Declared job {name!r}" in warning.msg
    assert words in warning.msg
    result = sync()
    assert {c.name: c.action for c in result.changes} == {name: "invalid", "ok": "create"}
    assert list(JobDefinition.objects.values_list("name", flat=True)) == ["ok"]


def test_jobs_that_is_not_a_dict_is_a_warning_and_disables_nothing_synced_from_settings(settings):
    declare(settings, nightly=NIGHTLY)
    sync()
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "JOBS": [NIGHTLY]}
    [warning] = check_settings()
    assert warning.id == "cluster_cron.W004"
    assert "must be a dict of job name -> job fields, not list" in warning.msg
    # Not taken for removed: kept, and the sync says why.
    assert [c.action for c in sync().changes] == ["invalid", "kept"]
    assert JobDefinition.objects.get(name="nightly").enabled is True


def test_a_name_declared_twice_is_left_out_and_its_row_left_alone(settings):
    from celery import shared_task

    declare(settings, **{"tests.twice": {**NIGHTLY, "task": "tests.add"}})
    sync()
    before = JobDefinition.objects.filter(name="tests.twice").values().get()

    @cron("0 5 * * *")
    @shared_task(name="tests.twice")
    def twice() -> None:
        pass

    [warning] = check_settings()
    assert warning.id == "cluster_cron.W004"
    assert "name: declared 2 times: at settings CLUSTER_CRON['JOBS']['tests.twice'] and" in (
        warning.msg
    )
    assert [c.action for c in sync().changes] == ["invalid"]
    assert JobDefinition.objects.filter(name="tests.twice").values().get() == before


def test_a_decorator_with_a_bad_keyword_does_not_break_its_module_import(settings):
    from celery import shared_task

    @cron("0 5 * * *", colour="blue")  # raised at import before: the task module failed
    @shared_task(name="tests.colourful")
    def colourful() -> None:
        pass

    assert colourful.name == "tests.colourful"
    [warning] = check_settings()
    assert warning.id == "cluster_cron.W004"
    assert "Declared job 'tests.colourful'" in warning.msg
    assert "colour: 'colour' cannot be declared: not a job field" in warning.msg


def test_migrate_syncs_the_valid_ones_and_leaves_the_bad_one_out(settings, capsys):
    from django.apps import apps

    from django_cluster_cron.apps import _sync_after_migrate

    declare(settings, nightly=NIGHTLY, broken={**NIGHTLY, "timezone": "Mars/Olympus"})
    _sync_after_migrate(apps.get_app_config("django_cluster_cron"), verbosity=1)
    assert list(JobDefinition.objects.values_list("name", flat=True)) == ["nightly"]
    assert "cluster-cron: invalid   broken (timezone:" in capsys.readouterr().out


def test_cluster_health_shows_a_declaration_left_out_as_a_warning(settings, capsys):
    from django_cluster_cron.ops.health import WARN, check_declared_jobs
    from tests.support.querycount import count_queries

    declare(settings, nightly=NIGHTLY)
    with count_queries() as queries:
        assert check_declared_jobs().status == "ok"
    assert len(queries) == 0  # the health checks' cost does not grow with declarations
    declare(settings, nightly=NIGHTLY, broken={**NIGHTLY, "schedule": "61 * * * *"})
    check = check_declared_jobs()
    assert (check.status, check.value) == (WARN, 1)
    assert check.reason.startswith("1 declared job(s) left out of the sync: 'broken' (schedule:")
    with contextlib.suppress(SystemExit):  # no leader in this test: that check fails
        call_command("cluster_health", "--no-broker")
    assert f"warn declared_jobs: {check.reason}" in capsys.readouterr().out
    with contextlib.suppress(SystemExit):
        call_command("cluster_health", "--no-broker", "--json")
    document = json.loads(capsys.readouterr().out)
    [shown] = [c for c in document["checks"] if c["name"] == "declared_jobs"]
    assert shown == {"name": "declared_jobs", "status": "warn", "reason": check.reason, "value": 1}


def test_the_admin_tells_operators_which_declaration_was_left_out_and_why(settings, admin_client):
    declare(settings, nightly=NIGHTLY)
    sync()
    declare(settings, nightly={**NIGHTLY, "schedule": "61 * * * *"}, spare=NIGHTLY)
    sync()
    jobs = admin_client.get(reverse("admin:django_cluster_cron_jobdefinition_changelist"))
    page = jobs.content.decode()
    assert "1 job declared in code is left out of the sync until fixed" in page
    assert "<strong>nightly</strong>: schedule: minute field: &#x27;61&#x27;" in page
    cluster = admin_client.get(reverse("admin:django_cluster_cron_clusterstatus_changelist"))
    assert "<strong>nightly</strong>: schedule: minute field" in cluster.content.decode()
    job = JobDefinition.objects.get(name="nightly")
    change = admin_client.get(
        reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    )
    assert "Its declaration is invalid and left out of the sync: schedule:" in (
        change.content.decode()
    )
