"""The job's admin page as an operator uses it, posted with exactly the fields the page renders:
a job declared in code is paused, resumed and annotated there."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_cluster_cron.declared import forget_decorated
from django_cluster_cron.declared.sync import sync
from django_cluster_cron.models import JobDefinition
from tests.support.forms import posted_fields

pytestmark = pytest.mark.django_db

NIGHTLY = {"task": "tests.add", "schedule": "0 3 * * *", "timezone": "Europe/Berlin"}
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
    assert (job.cron, job.timezone, job.task) == ("0 3 * * *", "Europe/Berlin", "tests.add")
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
    fields.update(timezone="America/New_York", task="tests.add", _save="Save")
    response = admin_client.post(change_url(job), fields)
    assert response.status_code == 302, errors_of(response)
    job.refresh_from_db()
    assert (job.timezone, job.task) == ("America/New_York", "tests.add")
