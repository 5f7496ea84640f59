"""The jobs' audit trail: every door a change comes through is recorded with who, what and why."""

from __future__ import annotations

import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from django_cluster_cron import audit
from django_cluster_cron.declared import forget_decorated
from django_cluster_cron.models import JobChange, JobDefinition
from tests.database.test_admin import VALID

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _own_prefix(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}"}
    forget_decorated()
    yield
    forget_decorated()


def make_job(**fields) -> JobDefinition:
    job = JobDefinition(
        **{
            "name": f"job-{uuid.uuid4().hex}",
            "cron": "30 2 * * *",
            "timezone": "Europe/Berlin",
            "task": "tests.add",
            "args": [1, 2],
            **fields,
        }
    )
    job.full_clean()
    job.save()
    return job


def trail(job: JobDefinition) -> list[JobChange]:
    return list(JobChange.objects.filter(job=job))  # newest first


def test_a_save_in_your_own_code_is_recorded_as_shell_with_the_values_it_was_made_with():
    job = make_job()
    [created] = trail(job)
    assert (created.action, created.via, created.actor, created.user_id) == (
        "created",
        "shell",
        "",
        None,
    )
    assert created.changes["cron"] == "30 2 * * *"
    assert created.changes["args"] == [1, 2]
    job.cron = "0 4 * * *"
    with audit.acting("deploy bot", note="OPS-123"):
        job.save()
    changed = trail(job)[0]
    assert (changed.action, changed.actor, changed.note) == ("changed", "deploy bot", "OPS-123")
    assert changed.changes == {"cron": ["30 2 * * *", "0 4 * * *"]}


def test_bookkeeping_is_not_a_change():
    job = make_job()
    job.next_run_at = timezone.now() + timedelta(hours=3)
    job.last_scheduled_at = timezone.now()
    job.save()
    job.description = job.description  # nothing audited moved
    job.save()
    assert [c.action for c in trail(job)] == ["created"]


def test_the_admin_form_records_the_user_the_fields_and_the_note(admin_client, admin_user):
    add = admin_client.post(
        reverse("admin:django_cluster_cron_jobdefinition_add"),
        {**VALID, "change_note": "a new nightly report"},
    )
    assert add.status_code == 302
    job = JobDefinition.objects.get(name="report")
    edit = admin_client.post(
        reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk]),
        {**VALID, "cron": "45 3 * * *", "change_note": "the warehouse loads later now"},
    )
    assert edit.status_code == 302
    changed, created = trail(job)
    assert (created.action, created.via, created.user_id) == ("created", "admin", admin_user.pk)
    assert created.note == "a new nightly report"
    assert (changed.action, changed.via, changed.actor) == ("changed", "admin", "admin")
    assert changed.changes == {"cron": ["30 2 * * *", "45 3 * * *"]}
    assert changed.note == "the warehouse loads later now"

    page = admin_client.get(
        reverse("admin:django_cluster_cron_jobdefinition_history", args=[job.pk])
    )
    html = page.content.decode()
    assert page.status_code == 200
    assert "the warehouse loads later now" in html
    assert "30 2 * * *" in html
    assert "45 3 * * *" in html


def test_admin_pause_with_a_note_and_bulk_resume_are_recorded(admin_client, admin_user):
    job = make_job()
    admin_client.post(
        reverse("admin:django_cluster_cron_job_pause", args=[job.pk]), {"note": "vendor outage"}
    )
    admin_client.post(
        reverse("admin:django_cluster_cron_jobdefinition_changelist"),
        {"action": "resume_jobs", "_selected_action": [job.pk]},
    )
    resumed, paused = trail(job)[:2]
    assert (paused.action, paused.via, paused.user_id) == ("paused", "admin", admin_user.pk)
    assert paused.changes["pause_note"] == ["", "vendor outage"]
    assert (resumed.action, resumed.via) == ("resumed", "admin")


def test_the_api_records_its_user_and_serves_the_trail(redis_client):
    user = User.objects.create_superuser("ops", "ops@example.com", "x")
    api = APIClient()
    api.force_authenticate(user)
    job = make_job()
    response = api.patch(
        f"/cron/api/jobs/{job.pk}/",
        {"cron": "0 5 * * *", "change_note": "ticket 42"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert api.post(f"/cron/api/jobs/{job.pk}/run/").status_code in (200, 201)
    latest, changed = trail(job)[:2]
    assert (changed.action, changed.via, changed.actor, changed.user_id) == (
        "changed",
        "api",
        "ops",
        user.pk,
    )
    assert changed.note == "ticket 42"
    assert (latest.action, latest.via) == ("run_now", "api")
    body = api.get(f"/cron/api/jobs/{job.pk}/history/").json()
    assert [entry["action"] for entry in body["results"]] == ["run_now", "changed", "created"]
    assert body["results"][1]["changes"] == {"cron": ["30 2 * * *", "0 5 * * *"]}


def test_code_sync_and_import_are_recorded_as_themselves(settings):
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "JOBS": {"from-code": {"task": "tests.add", "schedule": "0 3 * * *", "args": [1, 2]}},
        "JOBS_VERSION": 7,
    }
    call_command("sync_jobs", stdout=StringIO())
    job = JobDefinition.objects.get(name="from-code")
    [created] = trail(job)
    assert (created.action, created.via, created.actor, created.note) == (
        "created",
        "code",
        "code sync",
        "version 7",
    )


def test_prune_deletes_history_only_when_asked_and_only_what_is_old():
    job = make_job()
    job.cron = "0 1 * * *"
    job.save()
    old = trail(job)[1]
    JobChange.objects.filter(pk=old.pk).update(at=timezone.now() - timedelta(days=400))
    call_command("prune_runs", "--days", "30", stdout=StringIO())
    assert len(trail(job)) == 2  # kept unless asked
    out = StringIO()
    call_command("prune_runs", "--days", "30", "--history-days", "365", stdout=out)
    assert "Deleted 1 history entries" in out.getvalue()
    assert [c.action for c in trail(job)] == ["changed"]
