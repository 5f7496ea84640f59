"""Secret-looking argument values are masked wherever people read them, and survive edits that
send the mask back; a new value replaces them."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from django_cluster_cron.models import JobDefinition
from django_cluster_cron.redaction import MASK, redact, restore
from tests.database.test_admin import VALID

pytestmark = pytest.mark.django_db

API = "/cron/api"
SECRETS = {"api_key": "sk_live_1", "db": {"Password": "hunter2", "host": "db1"}, "limit": 10}
ARGS = ["plain", {"token": "t0k"}]


def make_job(**fields) -> JobDefinition:
    job = JobDefinition(
        name="billing",
        cron="0 3 * * *",
        timezone="UTC",
        task="tests.echo",
        args=ARGS,
        kwargs=SECRETS,
        **fields,
    )
    job.full_clean()
    job.save()
    return job


def test_values_under_secret_looking_keys_are_masked_at_any_depth():
    assert redact(SECRETS) == {
        "api_key": MASK,
        "db": {"Password": MASK, "host": "db1"},
        "limit": 10,
    }
    assert redact(ARGS) == ["plain", {"token": MASK}]
    assert redact({"token": None}) == {"token": None}  # nothing to hide


def test_a_mask_sent_back_keeps_the_stored_value_and_a_new_value_replaces_it():
    sent = {"api_key": MASK, "db": {"Password": "new", "host": "db2"}, "limit": 10}
    assert restore(sent, SECRETS) == {
        "api_key": "sk_live_1",
        "db": {"Password": "new", "host": "db2"},
        "limit": 10,
    }
    assert restore({"api_key": MASK}, None) == {"api_key": MASK}  # nothing stored: as sent
    assert restore({"limit": MASK}, {"limit": 1}) == {"limit": MASK}  # not a secret's key


def test_the_keys_are_a_setting(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "REDACT_KEYS": ["limit"]}
    assert redact(SECRETS) == {"api_key": "sk_live_1", "db": SECRETS["db"], "limit": MASK}


def test_the_api_masks_job_bodies_and_history_and_a_put_back_keeps_the_secrets():
    job = make_job()
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "r@example.com", None))
    body = client.get(f"{API}/jobs/{job.pk}/").json()
    assert body["kwargs"] == redact(SECRETS)
    assert body["args"] == ["plain", {"token": MASK}]
    assert "sk_live_1" not in json.dumps(body)

    body["description"] = "nightly billing"
    put = client.put(f"{API}/jobs/{job.pk}/", body, format="json")
    assert put.status_code == 200, put.json()
    job.refresh_from_db()
    assert job.kwargs == SECRETS
    assert job.args == ARGS

    changed = client.patch(
        f"{API}/jobs/{job.pk}/", {"kwargs": {**body["kwargs"], "api_key": "sk_live_2"}},
        format="json",
    )  # fmt: skip
    assert changed.status_code == 200
    job.refresh_from_db()
    assert job.kwargs["api_key"] == "sk_live_2"
    assert job.kwargs["db"]["Password"] == "hunter2"
    history = json.dumps(client.get(f"{API}/jobs/{job.pk}/history/").json())
    assert "sk_live" not in history
    assert MASK in history


def test_a_job_declared_in_code_can_be_put_back_as_read(settings):
    job = make_job(source="code", code_origin="billing/jobs.py:12")
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "r@example.com", None))
    body = client.get(f"{API}/jobs/{job.pk}/").json()
    body["enabled"] = False
    assert client.put(f"{API}/jobs/{job.pk}/", body, format="json").status_code == 200
    job.refresh_from_db()
    assert (job.enabled, job.kwargs) == (False, SECRETS)


def form_data(job: JobDefinition, **changes: str) -> dict[str, str]:
    data = {**VALID, "name": job.name, "cron": job.cron, "timezone": job.timezone, **changes}
    data["task"] = job.task
    return data


def test_the_admin_form_masks_and_keeps_the_secrets_on_save(admin_client):
    job = make_job()
    url = reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    page = admin_client.get(url).content.decode()
    assert "sk_live_1" not in page
    assert "hunter2" not in page
    form = admin_client.get(url).context["adminform"].form
    shown = {name: form[name].value() for name in ("args", "kwargs")}
    saved = admin_client.post(url, form_data(job, **shown, description="edited"))
    assert saved.status_code == 302
    job.refresh_from_db()
    assert (job.description, job.kwargs, job.args) == ("edited", SECRETS, ARGS)
    history = admin_client.get(
        reverse("admin:django_cluster_cron_jobdefinition_history", args=[job.pk])
    ).content.decode()
    assert "sk_live_1" not in history


def test_a_viewer_sees_the_arguments_masked():
    job = make_job()
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_jobdefinition"))
    client = Client()
    client.force_login(viewer)
    url = reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "sk_live_1" not in html
    assert "hunter2" not in html
    assert "db1" in html  # the rest is shown


def test_a_job_declared_in_code_confirms_no_guess_at_a_masked_value():
    job = make_job(source="code", code_origin="billing/jobs.py:12")
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "r@example.com", None))
    for guess in ("sk_live_1", "sk_live_2"):  # the right value and a wrong one: the same answer
        answer = client.patch(
            f"{API}/jobs/{job.pk}/", {"kwargs": {**SECRETS, "api_key": guess}}, format="json"
        )
        assert answer.status_code == 400
        assert answer.json() == {"kwargs": ["Defined in code at billing/jobs.py:12: change it "
                                            "there and run sync_jobs."]}  # fmt: skip
    job.refresh_from_db()
    assert job.kwargs == SECRETS


def test_a_result_that_returns_its_arguments_is_kept_masked():
    from tests.support.jobs import apply, make_run

    job = make_job()
    job.task = "tests.echo"
    job.save()
    run = apply(make_run(job))
    assert run.status == "success", run.error
    assert "sk_live_1" not in run.result
    assert "hunter2" not in run.result
    assert MASK in run.result
