"""JobDefinition validation and bookkeeping, JobRun's one-row-per-slot constraint."""

from datetime import datetime, timedelta, timezone

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger

pytestmark = pytest.mark.django_db
UTC = timezone.utc


def make_job(**overrides):
    values = {
        "name": "nightly",
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "task": "tests.add",
        "args": [1, 2],
    }
    values.update(overrides)
    job = JobDefinition(**values)
    job.full_clean()
    job.save()
    return job


def errors_of(**overrides):
    values = {"name": "bad", "cron": "* * * * *", "timezone": "UTC", "task": "tests.add"}
    values.update(overrides)
    with pytest.raises(ValidationError) as caught:
        JobDefinition(**values).full_clean()
    return caught.value.message_dict


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"cron": "61 * * * *"}, "cron", "minute field: '61' — 61 is out of range 0-59"),
        ({"cron": "0 0 31 2 *"}, "cron", "never fires"),
        ({"cron": "* * *"}, "cron", "has 3 fields"),
        ({"timezone": "Mars/Base"}, "timezone", "Unknown time zone 'Mars/Base'"),
        ({"timezone": "../etc/passwd"}, "timezone", "is not a time zone name"),
        ({"task": "tests.nope"}, "task", "'tests.nope' is not registered"),
        ({"task": "celery.backend_cleanup"}, "task", "Celery's internal tasks"),
        ({"task": "django_cluster_cron.execute_run"}, "task", "django-cluster-cron's own tasks"),
        ({"task": "rm -rf /"}, "task", "is not a task name"),
        ({"args": {"a": 1}}, "args", "must be a JSON list"),
        ({"args": "1, 2"}, "args", "not a JSON string"),
        ({"kwargs": [1]}, "kwargs", "must be a JSON object"),
        ({"kwargs": {"not valid": 1}}, "kwargs", "not a valid Python identifier"),
        ({"args": ["x" * 70000]}, "args", "the limit is 65,536 bytes"),
        ({"queue": "bad queue!"}, "queue", "may only contain"),
        ({"catchup_policy": "sometimes"}, "catchup_policy", "is not a valid choice"),
        ({"overlap_policy": "never"}, "overlap_policy", "is not a valid choice"),
        ({"catchup_window": timedelta(0)}, "catchup_window", "longer than zero"),
        (
            {"cron": "* * * * * *", "catchup_window": timedelta(days=1)},
            "catchup_window",
            "more than 10,000 slots",
        ),
        (
            {"soft_time_limit": 60, "time_limit": 30},
            "soft_time_limit",
            "must be below the hard limit",
        ),
        ({"priority": 300}, "priority", "less than or equal to 255"),
    ],
)
def test_bad_input_is_reported_on_its_own_field(overrides, field, words):
    errors = errors_of(**overrides)
    assert field in errors, errors
    assert any(words in message for message in errors[field]), errors[field]


def test_several_bad_fields_are_all_reported_at_once():
    errors = errors_of(cron="nope", timezone="Nowhere", task="", args={})
    assert {"cron", "timezone", "task", "args"} <= set(errors)


def test_task_allowlist_narrows_the_registered_tasks(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "TASK_ALLOWLIST": ["tests.echo"]}
    errors = errors_of(task="tests.add")
    assert "not in CLUSTER_CRON['TASK_ALLOWLIST']" in errors["task"][0]
    JobDefinition(name="ok", cron="* * * * *", timezone="UTC", task="tests.echo").full_clean()


def test_a_new_job_gets_its_next_run_and_owes_nothing_from_before_it_existed():
    job = make_job()
    assert job.last_scheduled_at is not None
    assert job.next_run_at == job.schedule.next_after(job.last_scheduled_at)
    local = job.next_run_at.astimezone(job.schedule.zone)
    assert (local.hour, local.minute) in {(2, 30), (3, 0)}


def test_a_host_clock_running_ahead_does_not_move_the_watermark_past_unseen_slots(monkeypatch):
    # A web host 30 s ahead saves an every-second job: a watermark from its clock would mark the
    # next 30 slots as decided before any scheduler saw them. The database's clock sets it.
    from django.utils import timezone as dj_timezone

    from django_cluster_cron.dbtime import database_now

    real_now = dj_timezone.now
    monkeypatch.setattr(dj_timezone, "now", lambda: real_now() + timedelta(seconds=30))
    job = make_job(cron="* * * * * *", timezone="UTC")
    job.refresh_from_db()
    assert abs((job.last_scheduled_at - database_now()).total_seconds()) < 2
    job.pause()
    job.resume()
    job.refresh_from_db()
    assert abs((job.last_scheduled_at - database_now()).total_seconds()) < 2


def test_editing_the_cron_moves_next_run_and_restarts_the_watermark():
    job = make_job(cron="0 3 * * *")
    before = job.last_scheduled_at
    job.cron = "0 4 * * *"
    job.save()
    job.refresh_from_db()
    assert job.next_run_at.astimezone(job.schedule.zone).hour == 4
    assert job.last_scheduled_at >= before


def test_pausing_clears_next_run_and_resuming_restarts_from_now_without_catch_up():
    job = make_job(cron="* * * * *")
    job.pause()
    job.refresh_from_db()
    assert job.enabled is False
    assert job.next_run_at is None
    # Pretend the job was paused long ago.
    JobDefinition.objects.filter(pk=job.pk).update(
        last_scheduled_at=datetime(2020, 1, 1, tzinfo=UTC)
    )
    job.refresh_from_db()
    job.resume()
    job.refresh_from_db()
    assert job.last_scheduled_at > datetime(2020, 1, 2, tzinfo=UTC)
    assert job.next_run_at == job.schedule.next_after(job.last_scheduled_at)


def test_an_edit_that_keeps_the_schedule_does_not_overwrite_scheduler_bookkeeping():
    job = make_job(cron="* * * * *")
    advanced = datetime(2030, 1, 1, tzinfo=UTC)
    # The scheduler advances the row while an operator has the form open ...
    JobDefinition.objects.filter(pk=job.pk).update(next_run_at=advanced, last_scheduled_at=advanced)
    job.description = "edited in the admin"
    job.save()  # ... and the operator saves a stale copy.
    job.refresh_from_db()
    assert job.description == "edited in the admin"
    assert job.next_run_at == advanced
    assert job.last_scheduled_at == advanced


def test_soft_delete_hides_the_job_frees_its_name_and_restore_brings_it_back():
    job = make_job()
    job.soft_delete()
    assert not JobDefinition.objects.filter(pk=job.pk).exists()
    assert JobDefinition.all_objects.get(pk=job.pk).next_run_at is None
    make_job()  # the name is free again among live jobs
    with pytest.raises(ValidationError, match="already exists"):
        JobDefinition.all_objects.get(pk=job.pk).restore()
    JobDefinition.objects.get(name="nightly").soft_delete()
    restored = JobDefinition.all_objects.get(pk=job.pk)
    restored.restore()
    restored.refresh_from_db()
    assert restored.deleted_at is None
    assert restored.next_run_at is not None


def test_two_live_jobs_cannot_share_a_name():
    make_job()
    with pytest.raises(ValidationError, match="already exists"):
        make_job()


def test_a_row_with_bad_data_saved_without_validation_stays_out_of_the_due_index():
    job = JobDefinition(name="raw", cron="not a cron", timezone="UTC", task="tests.add")
    job.save()
    assert job.next_run_at is None
    assert (
        not JobDefinition.objects.due(datetime(2100, 1, 1, tzinfo=UTC)).filter(pk=job.pk).exists()
    )


def test_one_run_per_job_and_slot_is_enforced_by_the_database():
    job = make_job()
    slot = datetime(2024, 1, 1, tzinfo=UTC)
    JobRun.objects.create(
        job=job, scheduled_for=slot, task_id=job.task_id_for(slot), trigger=RunTrigger.SCHEDULE
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        JobRun.objects.create(
            job=job, scheduled_for=slot, task_id="other-id", trigger=RunTrigger.CATCHUP
        )
    assert JobRun.objects.get().status == RunStatus.PENDING


def test_selecting_due_jobs_is_one_query_whatever_the_number_of_jobs():
    now = datetime(2100, 1, 1, tzinfo=UTC)
    for count in (5, 50):
        JobDefinition.objects.bulk_create(
            JobDefinition(
                name=f"j{count}-{i}",
                cron="* * * * *",
                timezone="UTC",
                task="tests.add",
                next_run_at=now + timedelta(days=1),
            )
            for i in range(count)
        )
        with CaptureQueriesContext(connection) as queries:
            assert list(JobDefinition.objects.due(now)[:100]) == []
        assert len(queries) == 1
