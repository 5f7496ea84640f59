"""The API on a soft-deleted job: read-only until restored, with a reply that says so."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from django_cluster_cron.models import JobChange, JobDefinition

pytestmark = pytest.mark.django_db

API = "/cron/api"
DELETED = "The job is deleted: it is read-only until it is restored (POST jobs/{}/restore/)."


@pytest.fixture(autouse=True)
def _own_prefix(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}"}


@pytest.fixture
def admin():
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "r@example.com", "x"))
    return client


def deleted_job() -> JobDefinition:
    job = JobDefinition(name="old", cron="30 2 * * *", timezone="UTC", task="tests.echo")
    job.full_clean()
    job.save()
    job.soft_delete()
    return job


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("patch", "", {"cron": "0 4 * * *"}),
        ("patch", "", {"enabled": False}),
        ("put", "", None),  # the job as read, with a new schedule
        ("post", "pause/", {"note": "x"}),
        ("post", "resume/", None),
        ("post", "run/", None),
        ("post", "backfill/", {"start": "2020-01-01T00:00:00Z", "end": "2020-01-02T00:00:00Z"}),
    ],
)
def test_a_deleted_job_is_read_only_until_restored(admin, method, path, body):
    job = deleted_job()
    url = f"{API}/jobs/{job.pk}/{path}"
    if method == "put":
        body = {**admin.get(f"{API}/jobs/{job.pk}/").json(), "cron": "0 4 * * *"}
    before = JobDefinition.all_objects.filter(pk=job.pk).values().get()
    response = getattr(admin, method)(url, body, format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {"detail": DELETED.format(job.pk)}
    assert JobDefinition.all_objects.filter(pk=job.pk).values().get() == before
    assert not job.runs.exists()
    assert list(JobChange.objects.filter(job=job).values_list("action", flat=True)) == [
        "deleted",
        "created",
    ]


def test_a_restored_job_is_editable_again(admin):
    job = deleted_job()
    assert admin.post(f"{API}/jobs/{job.pk}/restore/").status_code == 200
    patched = admin.patch(f"{API}/jobs/{job.pk}/", {"cron": "0 4 * * *"}, format="json")
    assert patched.status_code == 200, patched.content
    job.refresh_from_db()
    assert job.cron == "0 4 * * *"


def test_a_deleted_job_can_still_be_read_and_deleted_again(admin):
    job = deleted_job()
    assert admin.get(f"{API}/jobs/{job.pk}/").json()["deleted_at"] is not None
    assert admin.delete(f"{API}/jobs/{job.pk}/").status_code == 204
