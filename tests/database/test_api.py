"""The REST API: jobs, runs, operator actions, permissions, validation, preview, health."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from rest_framework.test import APIClient

from django_cluster_cron import actions
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger

pytestmark = pytest.mark.django_db

API = "/cron/api"
GOOD = {
    "name": "nightly",
    "cron": "30 2 * * *",
    "timezone": "Europe/Berlin",
    "task": "tests.add",
    "args": [1, 2],
}


@pytest.fixture(autouse=True)
def _own_prefix(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}"}


@pytest.fixture
def admin():
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "r@example.com", "x"))
    return client


def user_with(*codenames: str) -> APIClient:
    user = User.objects.create_user(f"u{uuid.uuid4().hex[:6]}", password="x")
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_cluster_cron", codename=codename)
        )
    client = APIClient()
    client.force_authenticate(User.objects.get(pk=user.pk))  # fresh: no permission cache
    return client


def make_job(**fields):
    job = JobDefinition(**{**GOOD, "name": f"job-{uuid.uuid4().hex[:6]}", **fields})
    job.full_clean()
    job.save()
    return job


# -- jobs ---------------------------------------------------------------------------------------


def test_create_read_update_and_soft_delete_a_job(admin):
    created = admin.post(
        f"{API}/jobs/", {**GOOD, "args": [1, 2], "catchup_window": 7200}, format="json"
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["name"] == "nightly"
    assert body["args"] == [1, 2]
    assert body["catchup_window"] == 7200
    assert body["next_run_at"] is not None
    job_id = body["id"]
    assert admin.get(f"{API}/jobs/{job_id}/").json()["cron"] == "30 2 * * *"
    patched = admin.patch(f"{API}/jobs/{job_id}/", {"cron": "0 4 * * *"}, format="json")
    assert patched.status_code == 200, patched.json()
    assert patched.json()["cron"] == "0 4 * * *"
    assert admin.delete(f"{API}/jobs/{job_id}/").status_code == 204
    job = JobDefinition.all_objects.get(pk=job_id)
    assert job.deleted_at is not None  # soft: the ledger stays
    assert [j["id"] for j in admin.get(f"{API}/jobs/?deleted=true").json()["results"]] == [job_id]
    restored = admin.post(f"{API}/jobs/{job_id}/restore/")
    assert restored.status_code == 200
    assert restored.json()["deleted_at"] is None


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"cron": "61 * * * *"}, "cron", "minute field"),
        ({"cron": "0 0 31 2 *"}, "cron", "never fires"),
        ({"timezone": "Mars/Olympus"}, "timezone", "Mars/Olympus"),
        ({"task": "nope.nothing"}, "task", "nope.nothing"),
        ({"task": "django_cluster_cron.execute_run"}, "task", "django-cluster-cron's own"),
        ({"args": {"a": 1}}, "args", "list"),
        ({"kwargs": [1]}, "kwargs", "object"),
        ({"catchup_window": -5}, "catchup_window", "positive"),
        ({"soft_time_limit": 30, "time_limit": 10}, "soft_time_limit", "below"),
        ({"on_uncertain": "sometimes"}, "on_uncertain", "sometimes"),
    ],
)
def test_bad_input_is_refused_on_its_own_field_with_the_models_words(admin, fields, field, words):
    response = admin.post(f"{API}/jobs/", {**GOOD, **fields}, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert field in errors, errors
    assert words in " ".join(errors[field])
    assert not JobDefinition.all_objects.exists()


def test_a_name_taken_by_a_live_job_is_refused_on_the_name(admin):
    make_job(name="taken")
    response = admin.post(f"{API}/jobs/", {**GOOD, "name": "taken"}, format="json")
    assert response.status_code == 400
    assert response.json()["name"] == ["A job with this name already exists."]


def test_the_job_list_filters_and_pages(admin):
    make_job(name="billing-a", task="tests.add")
    paused = make_job(name="billing-b")
    paused.pause("maintenance")
    make_job(name="reports", task="tests.echo")
    names = lambda query: [j["name"] for j in admin.get(f"{API}/jobs/{query}").json()["results"]]  # noqa: E731
    assert names("?search=billing") == ["billing-a", "billing-b"]
    assert names("?search=echo") == ["reports"]
    assert names("?enabled=false") == ["billing-b"]
    page = admin.get(f"{API}/jobs/?limit=2").json()
    assert page["count"] == 3
    assert len(page["results"]) == 2
    assert page["next"]
    assert admin.get(f"{API}/jobs/?enabled=maybe").status_code == 400


# -- operator actions: the admin's functions, the admin's ledger rows ---------------------------


def test_pause_with_a_note_and_resume(admin):
    job = make_job()
    paused = admin.post(f"{API}/jobs/{job.pk}/pause/", {"note": "db migration"}, format="json")
    assert paused.status_code == 200
    assert (paused.json()["enabled"], paused.json()["pause_note"]) == (False, "db migration")
    resumed = admin.post(f"{API}/jobs/{job.pk}/resume/")
    assert resumed.json()["enabled"] is True


def test_run_now_records_the_same_run_as_the_admin(admin, redis_client):
    job = make_job()
    response = admin.post(f"{API}/jobs/{job.pk}/run/")
    assert response.status_code == 201, response.json()
    via_api = JobRun.objects.get(pk=response.json()["id"])
    via_admin = actions.run_now(make_job(), by="admin")
    for run in (via_api, via_admin):
        assert run.trigger == RunTrigger.MANUAL
        assert run.status == RunStatus.QUEUED
        assert run.task_id == run.job.task_id_for(run.scheduled_for)
    assert via_api.dispatched_by == "api:root"


def test_backfill_previews_then_records_the_missing_slots(admin, redis_client):
    job = make_job(cron="0 * * * *", timezone="UTC")
    end = timezone.now().replace(minute=30, second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(hours=5)
    body = {"start": start.isoformat(), "end": end.isoformat(), "dry_run": True}
    preview = admin.post(f"{API}/jobs/{job.pk}/backfill/", body, format="json")
    assert preview.status_code == 200, preview.json()
    assert (preview.json()["slots"], preview.json()["created"]) == (5, [])
    done = admin.post(f"{API}/jobs/{job.pk}/backfill/", {**body, "dry_run": False}, format="json")
    assert len(done.json()["created"]) == 5
    assert JobRun.objects.filter(job=job, trigger=RunTrigger.BACKFILL).count() == 5
    future = {"start": start.isoformat(), "end": (timezone.now() + timedelta(hours=1)).isoformat()}
    refused = admin.post(f"{API}/jobs/{job.pk}/backfill/", future, format="json")
    assert refused.status_code == 400
    assert "past" in refused.json()["detail"]


def make_run(job, status, minutes_ago=10):
    slot = timezone.now().replace(microsecond=0) - timedelta(minutes=minutes_ago)
    return JobRun.objects.create(
        job=job, scheduled_for=slot, task_id=job.task_id_for(slot), status=status
    )


def test_runs_list_filters_and_cursor_pages_newest_first(admin):
    job, other = make_job(), make_job()
    for minutes in range(1, 6):
        make_run(job, RunStatus.SUCCESS, minutes)
    make_run(job, RunStatus.FAILED, 30)
    make_run(other, RunStatus.SUCCESS, 3)
    first = admin.get(f"{API}/runs/?job={job.pk}&limit=2").json()
    slots = [r["scheduled_for"] for r in first["results"]]
    assert slots == sorted(slots, reverse=True)
    second = admin.get(first["next"]).json()
    assert len(second["results"]) == 2
    assert {r["id"] for r in first["results"]}.isdisjoint(r["id"] for r in second["results"])
    failed = admin.get(f"{API}/runs/?status=failed").json()["results"]
    assert [r["status"] for r in failed] == ["failed"]
    after = (timezone.now() - timedelta(minutes=4, seconds=30)).isoformat()
    recent = admin.get(f"{API}/runs/", {"job": job.pk, "after": after}).json()["results"]
    assert len(recent) == 4
    assert admin.get(f"{API}/runs/?after=yesterday").status_code == 400
    assert admin.get(f"{API}/runs/?after=2026-11-24T09:00").status_code == 400  # RFC 3339 only
    # Found by schemathesis: an offset PostgreSQL refuses (beyond 15:59) was a 500.
    far = admin.get(f"{API}/runs/", {"before": "1511-08-22T00:00:26-20:49"})
    assert far.status_code == 200
    assert admin.get(f"{API}/runs/?limit=0").status_code == 400
    assert admin.get(f"{API}/runs/?limit=").status_code == 400


def test_retry_a_failed_run_and_cancel_a_queued_one(admin, redis_client):
    job = make_job()
    failed = make_run(job, RunStatus.FAILED)
    retried = admin.post(f"{API}/runs/{failed.pk}/retry/")
    assert retried.status_code == 200, retried.json()
    assert retried.json()["attempt"] == 2
    queued = make_run(job, RunStatus.QUEUED, 20)
    cancelled = admin.post(f"{API}/runs/{queued.pk}/cancel/")
    assert cancelled.json()["status"] == "cancelled"
    again = admin.post(f"{API}/runs/{queued.pk}/cancel/")
    assert again.status_code == 400
    assert "only a waiting or running run" in again.json()["detail"]


# -- permissions --------------------------------------------------------------------------------


# Who may call each endpoint: tests/database/test_permission_matrix.py, against the reference.


# -- preview, health, schema --------------------------------------------------------------------


def test_the_preview_gives_fire_times_or_says_which_input_is_wrong(admin):
    response = admin.get(
        f"{API}/preview/", {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin", "count": 3}
    )
    assert response.status_code == 200
    body = response.json()
    assert len(body["fire_times"]) == 3
    assert "09:00" in body["description"] or "9:00" in body["description"]
    bad_cron = admin.get(f"{API}/preview/", {"cron": "0 25 * * *"})
    assert bad_cron.status_code == 400
    assert "hour" in bad_cron.json()["cron"][0]
    bad_zone = admin.get(f"{API}/preview/", {"cron": "0 9 * * *", "timezone": "Nowhere/Land"})
    assert "timezone" in bad_zone.json()


def test_health_needs_the_cluster_status_permission_and_answers_the_report(admin):
    assert APIClient().get(f"{API}/health/").status_code in (401, 403)
    assert user_with("view_jobdefinition").get(f"{API}/health/").status_code == 403
    allowed = user_with("view_clusterstatus").get(f"{API}/health/?broker=false")
    assert allowed.status_code == 503
    response = admin.get(f"{API}/health/?broker=false")
    assert response.status_code == 503  # no scheduler runs in this test
    assert {c["name"] for c in response.json()["checks"]} >= {"leader", "waiting_runs"}


def test_the_schema_and_the_offline_swagger_ui_are_served_to_logged_in_users(admin):
    assert APIClient().get(f"{API}/schema/?format=json").status_code in (401, 403)
    assert APIClient().get(f"{API}/docs/").status_code in (401, 403)
    schema = user_with().get(f"{API}/schema/?format=json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/cron/api/jobs/{id}/pause/" in paths
    docs = admin.get(f"{API}/docs/")
    assert docs.status_code == 200
    page = docs.content.decode()
    assert "drf_spectacular_sidecar" in page  # served from our static files, not a CDN
    # Not the bare "cdn": the page's random CSRF token holds those three letters now and then.
    assert not re.search(r"cdn\.|jsdelivr|unpkg|cdnjs", page.lower())


def test_the_list_filters_are_in_the_schema(admin):
    paths = admin.get(f"{API}/schema/?format=json").json()["paths"]

    def names(path):
        return {p["name"] for p in paths[f"{API}/{path}"]["get"].get("parameters", [])}

    assert {"search", "enabled", "deleted"} <= names("jobs/")
    assert {"job", "status", "trigger", "after", "before"} <= names("runs/")


def test_the_reference_page_lists_every_operation_of_the_schema(admin):
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "api.md").read_text()
    paths = admin.get(f"{API}/schema/?format=json").json()["paths"]
    missing = []
    for path, methods in paths.items():
        relative = path.removeprefix(f"{API}/")
        for method in methods:
            if f"{method.upper()} {relative}" not in page and not (
                method in ("put", "patch") and f"`PATCH {relative}`" in page
            ):
                missing.append(f"{method.upper()} {relative}")
    assert not missing, f"docs/reference/api.md does not list: {missing}"


def test_a_job_declared_in_code_is_read_only_through_the_api_except_pause(admin, settings):
    from django_cluster_cron.declared.sync import sync

    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "JOBS": {"declared": {"task": "tests.add", "schedule": "0 3 * * *", "args": [1, 2]}},
    }
    sync()
    job = JobDefinition.objects.get(name="declared")
    body = admin.get(f"{API}/jobs/{job.pk}/").json()
    assert (body["source"], body["code_origin"]) == (
        "code",
        "settings CLUSTER_CRON['JOBS']['declared']",
    )
    refused = admin.patch(f"{API}/jobs/{job.pk}/", {"cron": "0 4 * * *"}, format="json")
    assert refused.status_code == 400
    assert "Defined in code at settings" in refused.json()["cron"][0]
    assert admin.post(f"{API}/jobs/{job.pk}/pause/").status_code == 200


def test_filters_with_a_nul_character_or_an_unknown_choice_are_refused_on_the_field(admin):
    """Found by schemathesis on PostgreSQL, which refuses NUL in any text: a 500 before."""
    response = admin.get(f"{API}/jobs/", {"search": "ni\x00ght"})
    assert response.status_code == 400
    assert "NUL" in response.json()["search"][0]
    response = admin.get(f"{API}/runs/", {"status": "sucess"})
    assert response.status_code == 400
    assert "'sucess' is not one of: pending, buffered, queued" in response.json()["status"][0]
    assert admin.get(f"{API}/runs/", {"trigger": "backfill"}).status_code == 200


def test_a_request_that_fails_leaves_no_actor_behind(monkeypatch):
    """A server error skips DRF's finalize_response; the request's user must not stay the actor
    of whatever this thread saves next."""
    from django_cluster_cron import audit
    from django_cluster_cron.api import views

    def broken(self, *args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(views.JobViewSet, "list", broken)
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(User.objects.create_superuser("ops", "o@example.com", "x"))
    assert client.get(f"{API}/jobs/").status_code == 500
    assert audit.current() == audit.Actor()


# -- nothing a request sends is dropped without a word ------------------------------------------


def history(admin, job_id):
    return admin.get(f"{API}/jobs/{job_id}/history/").json()["results"]


def test_enabled_false_pauses_and_true_resumes_as_the_actions_do(admin):
    """The trial that found it: "enabled": false answered 200 and the job kept running."""
    job, twin = make_job(), make_job()
    paused = admin.patch(
        f"{API}/jobs/{job.pk}/", {"enabled": False, "pause_note": "db migration"}, format="json"
    )
    assert paused.status_code == 200, paused.json()
    assert (paused.json()["enabled"], paused.json()["pause_note"]) == (False, "db migration")
    job.refresh_from_db()
    assert (job.enabled, job.pause_note) == (False, "db migration")
    admin.post(f"{API}/jobs/{twin.pk}/pause/", {"note": "db migration"}, format="json")
    keys = ("actor", "via", "action", "changes")
    assert [{k: c[k] for k in keys} for c in history(admin, job.pk)][:1] == [
        {k: c[k] for k in keys} for c in history(admin, twin.pk)
    ][:1]
    assert history(admin, job.pk)[0]["action"] == "paused"
    assert history(admin, job.pk)[0]["via"] == "api"
    resumed = admin.patch(f"{API}/jobs/{job.pk}/", {"enabled": True}, format="json")
    assert (resumed.json()["enabled"], resumed.json()["pause_note"]) == (True, "")
    assert history(admin, job.pk)[0]["action"] == "resumed"
    again = admin.patch(f"{API}/jobs/{job.pk}/", {"enabled": True}, format="json")
    assert again.status_code == 200
    assert len(history(admin, job.pk)) == 3  # created, paused, resumed: nothing for a no-op


def test_a_job_created_paused_is_created_then_paused_with_its_note(admin):
    body = {**GOOD, "enabled": False, "pause_note": "not yet", "change_note": "staging"}
    created = admin.post(f"{API}/jobs/", body, format="json")
    assert created.status_code == 201, created.json()
    assert (created.json()["enabled"], created.json()["pause_note"]) == (False, "not yet")
    changes = history(admin, created.json()["id"])
    assert [(c["action"], c["note"]) for c in changes] == [
        ("paused", "staging"),
        ("created", "staging"),
    ]


def test_a_pause_note_goes_with_a_paused_job_only(admin):
    job = make_job()
    refused = admin.patch(f"{API}/jobs/{job.pk}/", {"pause_note": "why"}, format="json")
    assert refused.status_code == 400
    assert "running job has no pause note" in refused.json()["pause_note"][0]
    job.pause("first")
    changed = admin.patch(f"{API}/jobs/{job.pk}/", {"pause_note": "second"}, format="json")
    assert (changed.json()["enabled"], changed.json()["pause_note"]) == (False, "second")


def test_a_form_that_leaves_enabled_out_leaves_the_job_running(admin):
    job = make_job()
    response = admin.patch(f"{API}/jobs/{job.pk}/", {"description": "from a form"})
    assert response.status_code == 200, response.json()
    job.refresh_from_db()
    assert (job.enabled, job.description) == (True, "from a form")


def test_unknown_fields_are_refused_by_name_on_every_write(admin, redis_client):
    job = make_job()
    failed = make_run(job, RunStatus.FAILED)
    created = admin.post(f"{API}/jobs/", {**GOOD, "bogus": 1, "cronn": "x"}, format="json")
    assert created.status_code == 400
    assert set(created.json()) == {"bogus", "cronn"}
    assert "Not a field of a job" in created.json()["bogus"][0]
    assert not JobDefinition.objects.filter(name="nightly").exists()
    patched = admin.patch(f"{API}/jobs/{job.pk}/", {"enabeld": False}, format="json")
    assert patched.status_code == 400
    assert list(patched.json()) == ["enabeld"]
    for url, body, field in (
        (f"/jobs/{job.pk}/pause/", {"note": "x", "reason": "y"}, "reason"),
        (f"/jobs/{job.pk}/backfill/", {"start": "2026-01-01T00:00:00Z", "x": 1}, "x"),
        (f"/jobs/{job.pk}/resume/", {"note": "x"}, "note"),
        (f"/jobs/{job.pk}/run/", {"when": "now"}, "when"),
        (f"/runs/{failed.pk}/retry/", {"attempt": 5}, "attempt"),
        (f"/runs/{failed.pk}/cancel/", {"reason": "x"}, "reason"),
    ):
        response = admin.post(API + url, body, format="json")
        assert response.status_code == 400, url
        assert field in response.json(), (url, response.json())
    assert admin.post(f"{API}/jobs/{job.pk}/resume/", {}, format="json").status_code == 200
    assert admin.post(f"{API}/jobs/{job.pk}/resume/").status_code == 200
    failed.refresh_from_db()
    assert failed.attempt == 1  # the refused retry did nothing
    deleted = admin.delete(f"{API}/jobs/{job.pk}/", {"hard": True}, format="json")
    assert deleted.status_code == 400
    assert "DELETE jobs/{id}/ takes no body" in deleted.json()["hard"][0]


def test_read_only_fields_are_accepted_unchanged_and_refused_changed(admin):
    """A client may PUT back what it read; a read-only field it changed is refused by name."""
    job = make_job()
    read = admin.get(f"{API}/jobs/{job.pk}/").json()
    put = admin.put(f"{API}/jobs/{job.pk}/", {**read, "description": "same"}, format="json")
    assert put.status_code == 200, put.json()
    assert put.json()["description"] == "same"
    same_instant = read["created_at"].replace("Z", "+00:00")
    assert (
        admin.patch(
            f"{API}/jobs/{job.pk}/", {"created_at": same_instant}, format="json"
        ).status_code
        == 200
    )
    changed = admin.patch(
        f"{API}/jobs/{job.pk}/", {"id": 99, "source": "code", "scheduled_runs": True}, format="json"
    )
    assert changed.status_code == 400
    assert set(changed.json()) == {"id", "source", "scheduled_runs"}
    assert f"Read-only: it is {job.pk} and this request says 99" in changed.json()["id"][0]
    on_create = admin.post(f"{API}/jobs/", {**GOOD, "id": 99}, format="json")
    assert on_create.status_code == 400
    assert on_create.json() == {"id": ["Read-only: the server sets it. Leave it out."]}


def test_a_job_declared_in_code_can_be_paused_and_resumed_through_enabled(admin, settings):
    from django_cluster_cron.declared.sync import sync

    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "JOBS": {"declared": {"task": "tests.add", "schedule": "0 3 * * *", "args": [1, 2]}},
    }
    sync()
    job = JobDefinition.objects.get(name="declared")
    url = f"{API}/jobs/{job.pk}/"
    assert admin.patch(url, {"enabled": False}, format="json").json()["enabled"] is False
    refused = admin.patch(url, {"enabled": True, "cron": "0 4 * * *"}, format="json")
    assert refused.status_code == 400
    job.refresh_from_db()
    assert (job.enabled, job.cron) == (False, "0 3 * * *")  # all or nothing
    assert admin.patch(url, {"enabled": True}, format="json").json()["enabled"] is True


# -- no 500 for any body ------------------------------------------------------------------------


def raw(admin, method, url, body):
    return getattr(admin, method)(url, body.encode(), content_type="application/json")


def test_a_body_too_deep_or_not_json_is_a_400_not_a_500(admin):
    """The trial's 500: DRF's JSONParser let a RecursionError through."""
    job = make_job()
    for body in (
        '{"args": ' + "[" * 5000 + "]" * 5000 + "}",
        "[" * 201 + "]" * 201,
        '{"args": [1e400]}',
        '{"args": [NaN]}',
        '{"name": ',
    ):
        for method, url in (("post", f"{API}/jobs/"), ("patch", f"{API}/jobs/{job.pk}/")):
            response = raw(admin, method, url, body)
            assert response.status_code == 400, (body[:30], response.content[:300])
            assert "not JSON the API can read" in response.json()["detail"]
    deep = raw(admin, "post", f"{API}/jobs/", '{"args": ' + "[" * 5000 + "]" * 5000 + "}")
    assert "nests more than 200 levels deep" in deep.json()["detail"]


def test_values_no_database_or_reply_can_hold_are_refused_on_their_field(admin):
    cases = (
        ('"args": ["ok", "\\ud800"]', "args", "At [1]: a lone surrogate (\\ud800)"),
        ('"kwargs": {"a": {"b": "x\\u0000"}}', "kwargs", 'At ["a"]["b"]: a NUL character'),
        ('"kwargs": {"a": {"\\u0000": 1}}', "kwargs", 'At ["a"], key "\\u0000": a NUL'),
        ('"name": "\\ud800"', "name", "Surrogate"),
    )
    base = json.dumps(GOOD)[:-1]
    for fragment, field, words in cases:
        response = raw(admin, "post", f"{API}/jobs/", f"{base}, {fragment}}}")
        assert response.status_code == 400, response.content[:300]
        assert words in response.json()[field][0], response.json()
    # An error that quotes a lone surrogate back is still a reply that can be encoded.
    echoed = raw(admin, "post", f"{API}/jobs/", f'{base}, "catchup_policy": "\\ud800"}}')
    assert echoed.status_code == 400
    assert '"\\ud800" is not one of:' in echoed.json()["catchup_policy"][0]
    assert not JobDefinition.all_objects.exists()


def test_enabled_and_pause_note_are_writable_in_the_schema(admin):
    schemas = admin.get(f"{API}/schema/?format=json").json()["components"]["schemas"]
    for name in ("Job", "PatchedJob"):
        assert schemas[name]["properties"]["enabled"]["type"] == "boolean"
        assert not schemas[name]["properties"]["enabled"].get("readOnly")
        assert not schemas[name]["properties"]["pause_note"].get("readOnly")
    assert schemas["Job"]["properties"]["id"]["readOnly"] is True


# -- what an action answers a caller who may act but not view -----------------------------------


def test_an_action_answers_with_the_whole_job_or_run_only_to_who_may_view_it(admin):
    job = make_job(task="tests.echo", kwargs={"api_key": "sk_live_secret", "region": "eu"})
    pauser = user_with("pause_jobdefinition")
    paused = pauser.post(f"{API}/jobs/{job.pk}/pause/", {"note": "x"}, format="json")
    assert paused.status_code == 200
    assert paused.json() == {"id": job.pk, "name": job.name, "enabled": False, "deleted": False}
    resumed = pauser.post(f"{API}/jobs/{job.pk}/resume/", format="json").json()
    assert "sk_live_secret" not in str(resumed)
    assert resumed["enabled"] is True
    viewer = user_with("pause_jobdefinition", "view_jobdefinition")
    full = viewer.post(f"{API}/jobs/{job.pk}/pause/", {}, format="json").json()
    assert full["kwargs"] == {"api_key": "********", "region": "eu"}  # REDACT_KEYS masks

    slot = timezone.now().replace(microsecond=0)
    run = JobRun.objects.create(
        job=job,
        scheduled_for=slot,
        task_id=job.task_id_for(slot),
        status=RunStatus.QUEUED,
        trigger=RunTrigger.SCHEDULE,
        error="password=hunter2",
    )
    cancelled = user_with("cancel_jobrun").post(f"{API}/runs/{run.pk}/cancel/", format="json")
    assert cancelled.status_code == 200
    body = cancelled.json()
    assert set(body) == {"id", "job", "status", "attempt"}
    assert body["status"] == "cancelled"
    assert "hunter2" not in str(body)


def test_a_backfill_answers_with_whole_runs_only_to_who_may_view_them():
    job = make_job(cron="0 * * * *", timezone="UTC")
    now = timezone.now()
    body = {"start": (now - timedelta(hours=3)).isoformat(), "end": now.isoformat()}
    filler = user_with("backfill_jobdefinition")
    short = filler.post(f"{API}/jobs/{job.pk}/backfill/", body, format="json")
    assert short.status_code == 200, short.json()
    assert short.json()["created"]
    assert all(set(run) == {"id", "job", "status", "attempt"} for run in short.json()["created"])
    JobRun.objects.all().delete()
    viewer = user_with("backfill_jobdefinition", "view_jobrun")
    whole = viewer.post(f"{API}/jobs/{job.pk}/backfill/", body, format="json").json()
    assert all("traceback" in run and "task_id" in run for run in whole["created"])


def test_an_actions_two_answers_are_told_apart_by_the_schema(admin):
    schemas = admin.get(f"{API}/schema/?format=json").json()["components"]["schemas"]
    assert [s["$ref"] for s in schemas["RunReply"]["oneOf"]] == [
        "#/components/schemas/Run",
        "#/components/schemas/RunState",
    ]
    # A whole run has more properties than the short form allows: it matches one form only.
    assert schemas["RunState"]["additionalProperties"] is False
    assert schemas["JobState"]["additionalProperties"] is False


def test_a_jobs_choice_for_uncertain_slots_is_written_and_read(admin):
    created = admin.post(f"{API}/jobs/", {**GOOD, "on_uncertain": "run"}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["on_uncertain"] == "run"
    assert JobDefinition.objects.get(pk=created.json()["id"]).on_uncertain == "run"
    # Not given: at most once.
    other = admin.post(f"{API}/jobs/", {**GOOD, "name": "other"}, format="json")
    assert other.json()["on_uncertain"] == "skip"
