"""The job's admin page as an operator uses it, posted with exactly the fields the page renders:
a job declared in code is paused, resumed and annotated there; a soft-deleted job is read-only
until it is restored."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from django_cluster_cron.declared import forget_decorated
from django_cluster_cron.declared.sync import sync
from django_cluster_cron.models import JobChange, JobDefinition
from tests.support.forms import posted_fields

pytestmark = pytest.mark.django_db

NIGHTLY = {"task": "tests.echo", "schedule": "0 3 * * *", "timezone": "Europe/Berlin"}
FORM = "jobdefinition_form"


@pytest.fixture(autouse=True)
def _no_decorated():
    forget_decorated()
    yield
    forget_decorated()


def change_url(job: JobDefinition) -> str:
    return reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])


def declared_job(settings) -> JobDefinition:
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "JOBS": {"nightly": NIGHTLY}}
    sync()
    job: JobDefinition = JobDefinition.objects.get(name="nightly")
    return job


def errors_of(response) -> object:
    context = response.context
    if not context or "adminform" not in context:
        return None
    return context["adminform"].form.errors


def test_a_declared_job_is_paused_from_its_page_by_unticking_enabled(settings, admin_client):
    job = declared_job(settings)
    fields = posted_fields(admin_client.get(change_url(job)).content.decode(), FORM)
    assert "task" not in fields  # read-only on a declared job: the page does not post it
    assert "timezone" not in fields
    del fields["enabled"]  # unticked
    fields.update(pause_note="waiting for the new index", _save="Save")
    response = admin_client.post(change_url(job), fields)
    assert response.status_code == 302, errors_of(response)
    job.refresh_from_db()
    assert (job.enabled, job.pause_note) == (False, "waiting for the new index")
    assert (job.cron, job.timezone, job.task) == ("0 3 * * *", "Europe/Berlin", "tests.echo")
    # And resumed the same way.
    fields = posted_fields(admin_client.get(change_url(job)).content.decode(), FORM)
    fields.update(enabled="on", pause_note="", _save="Save")
    response = admin_client.post(change_url(job), fields)
    assert response.status_code == 302, errors_of(response)
    job.refresh_from_db()
    assert (job.enabled, job.pause_note) == (True, "")


def test_a_declared_jobs_pause_note_is_edited_from_its_page(settings, admin_client):
    job = declared_job(settings)
    job.pause("first note")
    fields = posted_fields(admin_client.get(change_url(job)).content.decode(), FORM)
    fields.update(pause_note="second note", _save="Save")
    response = admin_client.post(change_url(job), fields)
    assert response.status_code == 302, errors_of(response)
    job.refresh_from_db()
    assert (job.enabled, job.pause_note) == (False, "second note")


def test_a_job_made_in_the_admin_still_saves_its_task_and_zone_from_its_page(admin_client):
    job = JobDefinition(name="report", cron="30 2 * * *", timezone="UTC", task="tests.echo")
    job.full_clean()
    job.save()
    fields = posted_fields(admin_client.get(change_url(job)).content.decode(), FORM)
    fields.update(timezone="America/New_York", task="tests.whoami", _save="Save")
    response = admin_client.post(change_url(job), fields)
    assert response.status_code == 302, errors_of(response)
    job.refresh_from_db()
    assert (job.timezone, job.task) == ("America/New_York", "tests.whoami")


# -- a soft-deleted job is read-only until restored ----------------------------------------------


def deleted_job() -> JobDefinition:
    job = JobDefinition(name="old", cron="30 2 * * *", timezone="UTC", task="tests.echo")
    job.full_clean()
    job.save()
    job.soft_delete()
    return job


def test_a_deleted_jobs_page_is_read_only_and_says_how_to_restore_it(admin_client):
    job = deleted_job()
    page = admin_client.get(change_url(job))
    html = page.content.decode()
    assert page.status_code == 200
    assert 'name="cron"' not in html  # shown, not an input
    assert 'name="_save"' not in html
    assert "This job is deleted: it is read-only until it is restored" in html


def test_a_deleted_job_cannot_be_saved_from_a_page_loaded_before_its_deletion(admin_client):
    job = JobDefinition(name="old", cron="30 2 * * *", timezone="UTC", task="tests.echo")
    job.full_clean()
    job.save()
    fields = posted_fields(admin_client.get(change_url(job)).content.decode(), FORM)
    job.soft_delete()  # by someone else, while this page was open
    fields.update(cron="0 4 * * *", _save="Save")
    response = admin_client.post(change_url(job), fields)
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.cron == "30 2 * * *"


def test_a_deleted_job_is_not_paused_resumed_or_run_from_the_admin(admin_client):
    job = deleted_job()
    pause = admin_client.post(
        reverse("admin:django_cluster_cron_job_pause", args=[job.pk]), {"note": "x"}
    )
    resume = admin_client.post(reverse("admin:django_cluster_cron_job_resume", args=[job.pk]))
    run = admin_client.post(reverse("admin:django_cluster_cron_job_run", args=[job.pk]))
    for response in (pause, resume, run):
        assert response.status_code == 302
        assert response.url == change_url(job)
    messages = [str(m) for m in admin_client.get(change_url(job)).context["messages"]]
    assert any("old is deleted: restore it first" in m for m in messages), messages
    job.refresh_from_db()
    assert (job.enabled, job.pause_note) == (True, "")
    assert not job.runs.exists()
    listed = admin_client.post(
        reverse("admin:django_cluster_cron_jobdefinition_changelist"),
        {"action": "pause_jobs", "_selected_action": [job.pk]},
        follow=True,
    )
    assert [str(m) for m in listed.context["messages"]] == [
        "old: the job is deleted: restore it first."
    ]
    job.refresh_from_db()
    assert job.enabled is True
    assert not JobChange.objects.filter(job=job, action="paused").exists()


def test_a_restored_job_is_editable_again(admin_client):
    job = deleted_job()
    admin_client.post(
        reverse("admin:django_cluster_cron_jobdefinition_changelist"),
        {"action": "restore_jobs", "_selected_action": [job.pk]},
    )
    fields = posted_fields(admin_client.get(change_url(job)).content.decode(), FORM)
    fields.update(cron="0 4 * * *", _save="Save")
    response = admin_client.post(change_url(job), fields)
    assert response.status_code == 302, errors_of(response)
    job.refresh_from_db()
    assert (job.cron, job.deleted_at) == ("0 4 * * *", None)


def test_an_operator_with_change_permission_sees_a_deleted_job_read_only():
    job = deleted_job()
    operator = User.objects.create_user("operator", is_staff=True)
    operator.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["view_jobdefinition", "change_jobdefinition", "pause_jobdefinition"]
        )
    )
    client = Client()
    client.force_login(operator)
    page = client.get(change_url(job)).content.decode()
    assert 'name="cron"' not in page
    assert "This job is deleted: it is read-only until it is restored" in page
