"""The admin's job form shows each kind of bad input as a field-level error."""

import re

import pytest
from django.conf import settings
from django.urls import reverse

from django_cluster_cron.models import JobDefinition, JobRun

pytestmark = pytest.mark.django_db

VALID = {
    "name": "report",
    "description": "",
    "enabled": "on",
    "cron": "30 2 * * *",
    "timezone": "America/New_York",
    "task": "tests.echo",
    "args": "[1, 2]",
    "kwargs": "{}",
    "queue": "",
    "priority": "",
    "expires": "",
    "catchup_policy": "latest",
    "catchup_window": "01:00:00",
    "overlap_policy": "allow",
    "max_retries": "0",
    "retry_backoff": "10",
    "retry_backoff_max": "600",
    "soft_time_limit": "",
    "time_limit": "",
    "on_worker_lost": "retry",
    "on_uncertain": "skip",
    "start_at_0": "",
    "start_at_1": "",
    "end_at_0": "",
    "end_at_1": "",
    "max_runs": "",
    "jitter": "0",
    "pause_after_failures": "",
    "pieces": "",
    "pieces_planner": "",
    "max_failed_pieces": "0",
    "max_parallel_pieces": "",
    "pieces_success": "all",
    "pieces_success_count": "",
    "pieces_required": "[]",
    "on_complete": "",
    "retention": "",
    "keep_last": "",
}


def post(client, **changes):
    data = {**VALID, **changes}
    return client.post(reverse("admin:django_cluster_cron_jobdefinition_add"), data)


def field_errors(response, field):
    form = response.context["adminform"].form
    return [str(e) for e in form.errors.get(field, [])]


def test_a_valid_job_is_created_with_its_next_run(admin_client):
    response = post(admin_client)
    assert response.status_code == 302, (
        response.context and response.context["adminform"].form.errors
    )
    job = JobDefinition.objects.get(name="report")
    assert job.args == [1, 2]
    assert job.next_run_at is not None


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("cron", "99 * * * *", "minute field: '99' — 99 is out of range 0-59"),
        ("cron", "0 0 30 2 *", "never fires"),
        ("cron", "@reboot", "not a time schedule"),
        ("timezone", "Atlantis/Capital", "Unknown time zone"),
        ("task", "tests.missing", "not registered"),
        ("task", "celery.chord_unlock", "Celery's internal tasks"),
        ("task", "django_cluster_cron.execute_run", "django-cluster-cron's own tasks"),
        ("args", '{"a": 1}', "must be a JSON list"),
        ("args", "[1, 2", "Not valid JSON: expecting ',' delimiter at character 6."),
        ("args", "['a']", "JSON strings take double quotes. Write a list, such as [1, "),
        ("kwargs", '{"a": 1,\n "b"}', "Not valid JSON: expecting ':' delimiter at line 2, column"),
        ("kwargs", "[]", "must be a JSON object"),
        ("args", '"abc"', "not a JSON string."),
        ("args", "[" * 70 + "]" * 70, "nest more than 64 levels deep"),
        ("kwargs", '{"a": ' + "[" * 5000 + "]" * 5000 + "}", "nest more than 64 levels deep"),
        ("args", '["a\\u0000"]', "Arguments: at [0]: a NUL character"),
        ("kwargs", '{"a": 1e400}', "inf is not a number JSON can hold"),
        ("cron", "*/15 * * * * *", "If you meant their order, write '* * * * * */15'"),
        ("cron", "0 */15 * * * *", "Quartz and Spring put the seconds first"),
        ("catchup_policy", "sometimes", "Select a valid choice"),
        ("catchup_window", "banana", "Enter a duration as HH:MM:SS"),
        ("soft_time_limit", "100", "must be below the hard limit"),
    ],
)
def test_bad_input_shows_a_clear_error_on_its_field(admin_client, field, value, words):
    extra = {"time_limit": "50"} if field == "soft_time_limit" else {}
    response = post(admin_client, **{field: value}, **extra)
    assert response.status_code == 200
    errors = field_errors(response, field)
    assert any(words in e for e in errors), errors
    assert words.split("'")[0] in response.content.decode()
    assert not JobDefinition.objects.exists()


@pytest.mark.parametrize(
    ("value", "words"),
    [("", "This field is required."), ("1 " * 150, "at most 200 characters")],
)
def test_a_cron_the_form_refuses_gets_that_error_alone(admin_client, value, words):
    response = post(admin_client, cron=value)
    errors = field_errors(response, "cron")
    assert len(errors) == 1, errors
    assert words in errors[0]
    assert "Cron expression is empty" not in response.content.decode()


def test_every_second_of_whole_minutes_is_taken_when_written_as_0_59(admin_client):
    response = post(admin_client, cron="*/15 * * * * 0-59")
    assert response.status_code == 302
    assert JobDefinition.objects.get().cron == "*/15 * * * * 0-59"


def test_the_change_page_previews_the_next_ten_runs_in_the_job_zone(admin_client):
    post(admin_client, cron="30 2 * * *")
    job = JobDefinition.objects.get()
    page = admin_client.get(
        reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    )
    html = page.content.decode()
    assert page.status_code == 200
    assert "Next 10 runs" in html
    assert len(re.findall(r"<td>\w{3} \d{4}-\d\d-\d\d 0[23]:[03]0:00 E[SD]T</td>", html)) == 10


def test_the_run_ledger_is_read_only(admin_client):
    response = admin_client.get(reverse("admin:django_cluster_cron_jobrun_changelist"))
    assert response.status_code == 200
    assert admin_client.get(reverse("admin:django_cluster_cron_jobrun_add")).status_code == 403
    assert not JobRun.objects.exists()


def test_the_ledger_says_why_a_slot_did_not_run_on_hover(admin_client):
    """ "Why didn't this run?" answered from the run list: the reason is the status's tooltip."""
    from django.utils import timezone

    from django_cluster_cron.core.slots import task_id_for

    post(admin_client)
    job = JobDefinition.objects.get(name="report")
    slot = timezone.now().replace(microsecond=0)
    JobRun.objects.create(
        job=job,
        scheduled_for=slot,
        task_id=task_id_for(job.pk, slot),
        trigger="schedule",
        status="skipped",
        reason="overlap policy 'skip': the previous run is still waiting or running",
    )
    html = admin_client.get(reverse("admin:django_cluster_cron_jobrun_changelist")).content
    assert (
        b'title="overlap policy &#x27;skip&#x27;: the previous run is still waiting or running"'
        in html
    )


# -- the task field: Celery's tasks and Django's own ----------------------------------------


def add_page(client) -> str:
    return str(client.get(reverse("admin:django_cluster_cron_jobdefinition_add")).content.decode())


@pytest.mark.skipif(not settings.HAS_DJANGO_TASKS, reason="django-tasks is not installed")
def test_the_task_field_offers_both_systems_tasks_and_takes_a_django_tasks_path(
    admin_client, monkeypatch
):
    """A project's django.tasks tasks are offered beside its Celery tasks (the field offered
    Celery's registered tasks only: a django.tasks-only project could pick none), and any
    task's path may be typed (issue 44)."""
    from tests.testapp import dtasks, tasks

    # A django.tasks task in an installed app's tasks module, where the admin looks.
    monkeypatch.setattr(tasks, "dj_record", dtasks.record, raising=False)
    page = add_page(admin_client)
    assert '<datalist id="dcc-task-suggestions">' in page
    assert '<option value="tests.add">Celery task</option>' in page
    assert '<option value="tests.testapp.dtasks.record">django.tasks task</option>' in page
    response = post(admin_client, task="tests.testapp.dtasks.flaky", args='["x", 0]')
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert JobDefinition.objects.get(name="report").task == "tests.testapp.dtasks.flaky"
    # A task a job names is offered from then on, wherever it is defined.
    assert '<option value="tests.testapp.dtasks.flaky">a job&#x27;s task</option>' in add_page(
        admin_client
    )


def test_a_project_without_a_celery_app_is_offered_no_celery_task(admin_client, monkeypatch):
    from django_cluster_cron import celery_app

    monkeypatch.setattr(celery_app, "configured", lambda app: False)
    page = add_page(admin_client)
    assert '<datalist id="dcc-task-suggestions">' in page
    assert 'value="tests.add"' not in page
