"""The permission reference (docs/reference/permissions.md) against the running code.

Each row of the reference's tables names a page, an action or an endpoint and what a user needs
for it. For each row, every kind of user makes the row's request against fresh objects, and the
outcome must be the one the row's *needs* gives that user: allowed (the page served, the change
made) or refused (403, 401, the admin's login page, and nothing changed). An outcome that is
neither (a 500, a form error) fails the row. The rows here and in the reference must be the same
set, so a page added to one and not the other fails too.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_cluster_cron.leases import get_backend
from django_cluster_cron.leases.base import LOCK_PREFIX
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from tests.database.test_admin import VALID

pytestmark = pytest.mark.django_db

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "permissions.md"
APP = "django_cluster_cron"
API = "/cron/api"
JOB = {"cron": "30 2 * * *", "timezone": "America/New_York", "task": "tests.echo"}

# -- the reference ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    name: str
    section: str
    needs: str


def reference() -> tuple[list[str], dict[str, Row]]:
    """The permissions the reference names, and its rows by name."""
    section, named, rows = "", [], {}
    for line in REFERENCE.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| `"):
            continue
        name = cells[0].strip("`")
        if section == "The permissions":
            named.append(name)
        else:
            assert len(cells) == 3, line
            rows[name] = Row(name, section, cells[2])
    assert named, "the reference lists no permissions"
    assert rows, "the reference has no rows"
    return named, rows


NAMED, ROWS = reference()


def holds(needs: str, has: Callable[[str], bool], *, superuser: bool, logged_in: bool) -> bool:
    """Whether a *needs* cell holds for a user with these permissions (``has``)."""
    expression = re.sub(r"`(\w+)`", r'has("\1")', needs)
    expression = expression.replace("logged in", "logged_in").replace("anyone", "True")
    names = {"has": has, "superuser": superuser, "logged_in": logged_in}
    return bool(eval(expression, {"__builtins__": {}}, names))  # our own table


def allows(row: Row, user: User | None) -> bool:
    """What the row says for ``user`` (None: anonymous)."""
    if user is None:
        return holds(row.needs, lambda _: False, superuser=False, logged_in=False)
    if row.section == "The admin" and not user.is_staff:
        return False
    has = lambda codename: user.has_perm(f"{APP}.{codename}")  # noqa: E731
    return holds(row.needs, has, superuser=user.is_superuser, logged_in=True)


# -- the users ----------------------------------------------------------------------------------


def pairs() -> set[tuple[str, str]]:
    """Pairs of permissions that some row needs together (neither is enough alone)."""
    found = set()
    for row in ROWS.values():
        for pair in itertools.combinations(sorted(set(re.findall(r"`(\w+)`", row.needs))), 2):
            alone = [
                holds(row.needs, held.__contains__, superuser=False, logged_in=True)
                for held in (set(pair), {pair[0]}, {pair[1]})
            ]
            if alone[0] and not (alone[1] or alone[2]):
                found.add(pair)
    return found


USERS: list[tuple[str, bool, bool, tuple[str, ...] | None]] = [
    # (label, is_staff, is_superuser, codenames; None: every permission of the app)
    ("logged in, no permission", False, False, ()),
    ("staff, no permission", True, False, ()),
    *[(f"staff with {name}", True, False, (name,)) for name in NAMED],
    *[(f"staff with {a} and {b}", True, False, (a, b)) for a, b in sorted(pairs())],
    ("every permission, not staff", False, False, None),
    ("superuser", True, True, ()),
]


ANONYMOUS = ("anonymous", False, False, ())


def make_user(label: str, staff: bool, superuser: bool, codenames: tuple[str, ...] | None) -> User:
    user = User(username=f"u{uuid.uuid4().hex[:10]}", is_staff=staff, is_superuser=superuser)
    user.set_unusable_password()
    user.save()
    app = Permission.objects.filter(content_type__app_label=APP)
    if codenames is None:
        user.user_permissions.set(app)
    else:
        user.user_permissions.set(app.filter(codename__in=codenames))
        assert user.user_permissions.count() == len(codenames), label
    return user


def the_others_user() -> tuple[str, bool, bool, tuple[str, ...]]:
    """A staff user with every permission of the app that the reference does not name."""
    others = Permission.objects.filter(content_type__app_label=APP).exclude(codename__in=NAMED)
    codenames = tuple(others.values_list("codename", flat=True))
    assert codenames, "the app has permissions the reference does not name"
    return ("staff with every permission the reference does not name", True, False, codenames)


# -- what each row does -------------------------------------------------------------------------


class Objects:
    """Fresh objects for one request, made when a row first asks for them."""

    @cached_property
    def job(self) -> JobDefinition:
        return make_job()

    @cached_property
    def paused(self) -> JobDefinition:
        job = make_job()
        job.pause("for the matrix")
        return job

    @cached_property
    def deleted(self) -> JobDefinition:
        job = make_job()
        job.soft_delete()
        return job

    @cached_property
    def failed(self) -> JobRun:
        return make_run(self.job, RunStatus.FAILED)

    @cached_property
    def pending(self) -> JobRun:
        return make_run(self.job, RunStatus.PENDING)

    @cached_property
    def lock(self) -> str:
        name = f"matrix-{uuid.uuid4().hex[:8]}"
        assert get_backend().lease(LOCK_PREFIX + name, "holder", 300).try_acquire()
        return name

    @cached_property
    def new_name(self) -> str:
        return f"new-{uuid.uuid4().hex[:8]}"


def make_job() -> JobDefinition:
    job = JobDefinition(name=f"job-{uuid.uuid4().hex[:8]}", **JOB)
    job.full_clean()
    job.save()
    return job


def make_run(job: JobDefinition, status: str) -> JobRun:
    slot = timezone.now().replace(microsecond=0) - timedelta(minutes=10)
    run: JobRun = JobRun.objects.create(
        job=job, scheduled_for=slot, task_id=job.task_id_for(slot), status=status
    )
    return run


def fresh(obj: Any) -> Any:
    return type(obj)._default_manager.filter(pk=obj.pk).first()


def job_changes(o: Objects) -> str:
    return reverse(f"admin:{APP}_jobdefinition_changelist")


def form_of(job: JobDefinition, **changes: str | None) -> dict[str, str]:
    data = {**VALID, **JOB, "name": job.name, **changes}
    return {key: str(value) for key, value in data.items() if value is not None}


def list_action(action: str, target: Callable[[Objects], JobDefinition]) -> Callable[..., Any]:
    def call(client: Client, o: Objects) -> Any:
        return client.post(job_changes(o), {"action": action, "_selected_action": [target(o).pk]})

    return call


def run_action(action: str, target: Callable[[Objects], JobRun]) -> Callable[..., Any]:
    def call(client: Client, o: Objects) -> Any:
        url = reverse(f"admin:{APP}_jobrun_changelist")
        return client.post(url, {"action": action, "_selected_action": [target(o).pk]})

    return call


def manual_runs(job: Callable[[Objects], JobDefinition]) -> Callable[[Objects], bool]:
    return lambda o: JobRun.objects.filter(job=job(o), trigger=RunTrigger.MANUAL).exists()


def backfilled(o: Objects) -> bool:
    return bool(JobRun.objects.filter(job=o.job, trigger=RunTrigger.BACKFILL).exists())


def past_range() -> dict[str, str]:
    now = timezone.now()
    return {"start": (now - timedelta(days=3)).isoformat(), "end": now.isoformat()}


def admin_job(o: Objects, page: str) -> str:
    return reverse(f"admin:{APP}_{page}", args=[o.job.pk])


Call = Callable[[Client, Objects], Any]  # the test client's response
Effect = Callable[[Objects], bool]

# Row name -> (the request, what it changes if allowed; None for a page that only reads).
REQUESTS: dict[str, tuple[Call, Effect | None]] = {
    # the admin
    "admin.jobs.list": (lambda c, o: c.get(job_changes(o)), None),
    "admin.jobs.page": (lambda c, o: c.get(admin_job(o, "jobdefinition_change")), None),
    "admin.jobs.history": (lambda c, o: c.get(admin_job(o, "jobdefinition_history")), None),
    "admin.jobs.coming": (lambda c, o: c.get(reverse(f"admin:{APP}_job_forecast")), None),
    "admin.jobs.preview": (
        lambda c, o: c.get(reverse(f"admin:{APP}_job_preview"), {"cron": "* * * * *"}),
        None,
    ),
    "admin.jobs.add": (
        lambda c, o: c.post(
            reverse(f"admin:{APP}_jobdefinition_add"), {**VALID, **JOB, "name": o.new_name}
        ),
        lambda o: JobDefinition.objects.filter(name=o.new_name).exists(),
    ),
    "admin.jobs.edit": (
        lambda c, o: c.post(
            admin_job(o, "jobdefinition_change"), form_of(o.job, description="edited")
        ),
        lambda o: fresh(o.job).description == "edited",
    ),
    "admin.jobs.edit-state": (
        lambda c, o: c.post(admin_job(o, "jobdefinition_change"), form_of(o.job, enabled=None)),
        lambda o: not fresh(o.job).enabled,
    ),
    "admin.jobs.pause": (
        lambda c, o: c.post(admin_job(o, "job_pause"), {"note": "matrix"}),
        lambda o: not fresh(o.job).enabled,
    ),
    "admin.jobs.resume": (
        lambda c, o: c.post(reverse(f"admin:{APP}_job_resume", args=[o.paused.pk])),
        lambda o: fresh(o.paused).enabled,
    ),
    "admin.jobs.run": (
        lambda c, o: c.post(admin_job(o, "job_run")),
        manual_runs(lambda o: o.job),
    ),
    "admin.jobs.backfill": (
        lambda c, o: c.post(admin_job(o, "job_backfill"), {**past_range(), "confirm": "1"}),
        backfilled,
    ),
    "admin.jobs.list-pause": (
        list_action("pause_jobs", lambda o: o.job),
        lambda o: not fresh(o.job).enabled,
    ),
    "admin.jobs.list-resume": (
        list_action("resume_jobs", lambda o: o.paused),
        lambda o: fresh(o.paused).enabled,
    ),
    "admin.jobs.list-run": (
        list_action("run_jobs_now", lambda o: o.job),
        manual_runs(lambda o: o.job),
    ),
    "admin.jobs.list-softdelete": (
        list_action("soft_delete_jobs", lambda o: o.job),
        lambda o: fresh(o.job) is None,  # the default manager leaves soft-deleted jobs out
    ),
    "admin.jobs.list-restore": (
        list_action("restore_jobs", lambda o: o.deleted),
        lambda o: fresh(o.deleted) is not None,
    ),
    "admin.jobs.delete": (
        lambda c, o: c.post(admin_job(o, "jobdefinition_delete"), {"post": "yes"}),
        lambda o: not JobDefinition.all_objects.filter(pk=o.job.pk).exists(),
    ),
    "admin.runs.list": (lambda c, o: c.get(reverse(f"admin:{APP}_jobrun_changelist")), None),
    "admin.runs.page": (
        lambda c, o: c.get(reverse(f"admin:{APP}_jobrun_change", args=[o.failed.pk])),
        None,
    ),
    "admin.runs.retry": (
        run_action("retry_runs", lambda o: o.failed),
        lambda o: fresh(o.failed).attempt == 2,
    ),
    "admin.runs.cancel": (
        run_action("cancel_runs", lambda o: o.pending),
        lambda o: fresh(o.pending).status == RunStatus.CANCELLED,
    ),
    "admin.cluster": (lambda c, o: c.get(reverse(f"admin:{APP}_clusterstatus_changelist")), None),
    "admin.cluster.release": (
        lambda c, o: c.post(reverse(f"admin:{APP}_clusterstatus_changelist"), {"lock": o.lock}),
        lambda o: get_backend().lease(LOCK_PREFIX + o.lock, "probe", 1).holder() is None,
    ),
    # the API
    "api.jobs.list": (lambda c, o: c.get(f"{API}/jobs/"), None),
    "api.jobs.read": (lambda c, o: c.get(f"{API}/jobs/{o.job.pk}/"), None),
    "api.jobs.history": (lambda c, o: c.get(f"{API}/jobs/{o.job.pk}/history/"), None),
    "api.jobs.create": (
        lambda c, o: c.post(
            f"{API}/jobs/", {**JOB, "name": o.new_name}, content_type="application/json"
        ),
        lambda o: JobDefinition.objects.filter(name=o.new_name).exists(),
    ),
    "api.jobs.create-paused": (
        lambda c, o: c.post(
            f"{API}/jobs/",
            {**JOB, "name": o.new_name, "enabled": False},
            content_type="application/json",
        ),
        lambda o: JobDefinition.objects.filter(name=o.new_name, enabled=False).exists(),
    ),
    "api.jobs.edit": (
        lambda c, o: c.patch(
            f"{API}/jobs/{o.job.pk}/", {"description": "edited"}, content_type="application/json"
        ),
        lambda o: fresh(o.job).description == "edited",
    ),
    "api.jobs.edit-state": (
        lambda c, o: c.patch(
            f"{API}/jobs/{o.job.pk}/", {"enabled": False}, content_type="application/json"
        ),
        lambda o: not fresh(o.job).enabled,
    ),
    "api.jobs.delete": (
        lambda c, o: c.delete(f"{API}/jobs/{o.job.pk}/"),
        lambda o: fresh(o.job) is None,
    ),
    "api.jobs.pause": (
        lambda c, o: c.post(f"{API}/jobs/{o.job.pk}/pause/"),
        lambda o: not fresh(o.job).enabled,
    ),
    "api.jobs.resume": (
        lambda c, o: c.post(f"{API}/jobs/{o.paused.pk}/resume/"),
        lambda o: fresh(o.paused).enabled,
    ),
    "api.jobs.run": (
        lambda c, o: c.post(f"{API}/jobs/{o.job.pk}/run/"),
        manual_runs(lambda o: o.job),
    ),
    "api.jobs.backfill": (
        lambda c, o: c.post(
            f"{API}/jobs/{o.job.pk}/backfill/", past_range(), content_type="application/json"
        ),
        backfilled,
    ),
    "api.jobs.restore": (
        lambda c, o: c.post(f"{API}/jobs/{o.deleted.pk}/restore/"),
        lambda o: fresh(o.deleted) is not None,
    ),
    "api.runs.list": (lambda c, o: c.get(f"{API}/runs/"), None),
    "api.runs.read": (lambda c, o: c.get(f"{API}/runs/{o.failed.pk}/"), None),
    "api.runs.retry": (
        lambda c, o: c.post(f"{API}/runs/{o.failed.pk}/retry/"),
        lambda o: fresh(o.failed).attempt == 2,
    ),
    "api.runs.cancel": (
        lambda c, o: c.post(f"{API}/runs/{o.pending.pk}/cancel/"),
        lambda o: fresh(o.pending).status == RunStatus.CANCELLED,
    ),
    "api.preview": (lambda c, o: c.get(f"{API}/preview/", {"cron": "* * * * *"}), None),
    "api.preview-job": (lambda c, o: c.get(f"{API}/preview/", {"job": o.job.pk}), None),
    "api.health": (lambda c, o: c.get(f"{API}/health/", {"broker": "false"}), None),
    "api.schema": (lambda c, o: c.get(f"{API}/schema/"), None),
    "api.docs": (lambda c, o: c.get(f"{API}/docs/"), None),
    # the health view: every caller gets an answer; the row is about what it holds
    "health": (lambda c, o: c.get("/cron/health/", {"broker": "0"}), None),
    "health.details": (lambda c, o: c.get("/cron/health/", {"broker": "0"}), None),
}


def outcome(name: str, response: Any, changed: bool | None) -> str:
    """ "allowed", "refused", or what made it neither."""
    status = response.status_code
    if name.startswith("health"):
        checks = response.json()["checks"] if status in (200, 503) else None
        if not checks:
            return f"no report ({status})"
        if name == "health":
            return "allowed"
        return "allowed" if all("reason" in check for check in checks) else "refused"
    login = status == 302 and "/login/" in response.get("Location", "")
    refused = status in (401, 403) or login
    if changed is None:  # a page or a reading endpoint (the API's health: 503 when failing)
        if status == 200 or (name == "api.health" and status == 503):
            return "allowed"
        return "refused" if refused else f"status {status}"
    if changed:
        return "allowed" if status in (200, 201, 204, 302) else f"changed, but status {status}"
    # Nothing changed. The admin answers an action the user may not take with the list again
    # (it is not offered), and its forms save what the user may change and ignore the rest.
    if refused or (name.startswith("admin.") and status in (200, 302)):
        return "refused"
    return f"nothing changed, status {status}: {response.content[:300]!r}"


# -- the test -----------------------------------------------------------------------------------


def test_every_row_of_the_reference_is_checked_and_every_check_is_in_the_reference():
    assert sorted(REQUESTS) == sorted(ROWS)


def test_the_reference_names_every_custom_permission_of_the_app():
    custom = Permission.objects.filter(content_type__app_label=APP).exclude(
        codename__regex=r"^(add|change|delete|view)_"
    )
    assert set(custom.values_list("codename", flat=True)) <= set(NAMED)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_a_row_allows_exactly_the_users_it_names(name, redis_client, settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": f"m{uuid.uuid4().hex[:8]}"}
    row = ROWS[name]
    call, effect = REQUESTS[name]
    wrong = []
    for label, staff, superuser, codenames in [*USERS, the_others_user(), ANONYMOUS]:
        client = Client()
        user = None
        if label != "anonymous":
            user = make_user(label, staff, superuser, codenames)
            client.force_login(user)
            user = User.objects.get(pk=user.pk)  # no permission cache
        objects = Objects()
        response = call(client, objects)
        got = outcome(name, response, None if effect is None else effect(objects))
        expected = "allowed" if allows(row, user) else "refused"
        if got != expected:
            wrong.append(f"{label}: expected {expected}, got {got}")
    assert not wrong, f"{name} needs {row.needs}:\n" + "\n".join(wrong)
