"""Any body, into any field of every write endpoint of the API: the answer is a 2xx, or a 400 that
names the field (``non_field_errors``/``detail`` for a body that is not an object or not JSON);
never a 5xx, and no field of a request is dropped without a word."""

from __future__ import annotations

import json
import math
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework import serializers
from rest_framework.test import APIClient

from django_cluster_cron.api.serializers import JobSerializer
from django_cluster_cron.api.strict import printable
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus

pytestmark = pytest.mark.django_db

API = "/cron/api"
SWEEP = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
WHOLE_BODY = {"non_field_errors", "detail"}
ACTION_BODIES = {"note", "start", "end", "dry_run"}

_fields = JobSerializer().fields
WRITABLE = sorted(name for name, field in _fields.items() if not field.read_only)
READ_ONLY = sorted(name for name, field in _fields.items() if field.read_only)

ODD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "nightly\x00",
        "\ud800",  # a lone surrogate: sent escaped, as JSON allows
        "a\udfffb",
        "\u200f\u202eevil\u202c",  # RTL marks
        "x" * 100_000,
        "\u0663 \uff15 * * *",  # an Arabic-Indic three, a fullwidth five
        "0 * * * *",
        "*/5 * * * * *",
        "0 0 * * * 2026",
        "Europe/Berlin",
        "tests.add",
        "2026-11-24T09:00:00Z",
        "1e400",
        "null",
        "[]",
        "{}",
        "true",
    ]
)
NUMBERS = st.one_of(
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1, 10**30, 0, -1, 1]),
    st.floats(allow_nan=False, allow_infinity=False),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=30), ODD_TEXT)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8) | ODD_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)
# Nested just below, at and beyond what the API reads, and far beyond what Python can decode.
DEEP = st.sampled_from([150, 198, 199, 200, 201, 1_000, 5_000])


def deep_list(levels: int) -> str:
    return "[" * levels + "]" * levels


def deep_object(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


@pytest.fixture
def admin() -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser(f"r{uuid.uuid4().hex[:6]}", "", "x"))
    return client


def good_job(**fields: Any) -> dict[str, Any]:
    return {
        "name": f"sweep-{uuid.uuid4().hex[:8]}",
        "cron": "0 3 * * *",
        "task": "tests.add",
        "args": [1, 2],
        **fields,
    }


def make_job() -> JobDefinition:
    job = JobDefinition(**good_job(timezone="UTC"))
    job.full_clean()
    job.save()
    return job


def send(client: APIClient, method: str, url: str, raw: str | bytes) -> Any:
    """A raw JSON body: escaped lone surrogates and deep nesting reach the server as written."""
    body = raw.encode("utf-8") if isinstance(raw, str) else raw
    return getattr(client, method)(url, body, content_type="application/json")


def encode(value: Any) -> str:
    # ensure_ascii: a lone surrogate is written as the escape "\ud800", as a client would.
    return json.dumps(value, ensure_ascii=True)


def answered_well(response: Any, sent: set[str]) -> dict[str, Any] | None:
    """Fail on a 5xx, or on a 400 that names neither a field sent nor the body as a whole."""
    assert response.status_code < 500, response.content[:2000]
    if response.status_code == 204:
        return {}
    body = response.json()
    if response.status_code < 300:
        return dict(body)
    assert response.status_code == 400, (response.status_code, body)
    assert isinstance(body, dict), body
    assert body, "a 400 that says nothing"
    named = {printable(key, 100) for key in sent} | set(_fields) | WHOLE_BODY | ACTION_BODIES
    assert set(body) <= named, (set(body) - named, body)
    for key, messages in body.items():
        messages = [messages] if isinstance(messages, str) else messages
        assert messages, key
        assert all(isinstance(m, str) and m for m in messages), (key, messages)
    return None


def honoured(reply: dict[str, Any], field: str, value: Any) -> None:
    """A field the API answered 2xx to is in the job as sent (strings trimmed, and booleans
    read, as DRF does: "TRUE" is true)."""
    if field in ("args", "kwargs"):
        assert reply[field] == value, (field, reply[field], value)
    elif field == "enabled":
        read = serializers.BooleanField().to_internal_value(value)
        assert reply[field] is read, (field, reply[field], value)
    elif isinstance(value, str) and field in ("name", "cron", "timezone", "task", "queue"):
        assert reply[field] == value.strip(), (field, reply[field], value)
    elif (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and isinstance(reply[field], (int, float))
    ):
        # Seconds are kept to the microsecond.
        close = math.isclose(reply[field], value, rel_tol=1e-9, abs_tol=1e-6)
        assert close, (field, reply[field], value)


FIELD = st.sampled_from([*WRITABLE, *READ_ONLY, "bogus", "\ud800", "x" * 300])


# -- jobs: create, update, partial update -----------------------------------------------------


@SWEEP
@given(field=FIELD, value=JSON_VALUES)
def test_any_value_in_any_field_of_a_new_job(admin, field, value):
    body = {**good_job(), field: value}
    response = send(admin, "post", f"{API}/jobs/", encode(body))
    reply = answered_well(response, set(body))
    if reply is not None:
        assert field in WRITABLE, f"{field!r} was accepted on a new job"
        if field != "change_note":
            honoured(reply, field, value)


@SWEEP
@given(field=FIELD, value=JSON_VALUES, method=st.sampled_from(["patch", "put"]))
def test_any_value_in_any_field_of_an_update(admin, field, value, method):
    job = make_job()
    current = admin.get(f"{API}/jobs/{job.pk}/").json()
    # A PUT sends back what it read (read-only fields included), with one field changed.
    body = {**current, field: value} if method == "put" else {field: value}
    body.pop("change_note", None) if field != "change_note" else None
    response = send(admin, method, f"{API}/jobs/{job.pk}/", encode(body))
    reply = answered_well(response, set(body))
    if reply is not None:
        assert (
            field not in READ_ONLY
            or current[field] == value
            or field
            in (
                "next_run_at",
                "next_run",
                "last_scheduled_at",
                "created_at",
                "updated_at",
            )
        ), f"read-only {field!r} accepted with a new value"
        assert field != "bogus"
        if field in WRITABLE and field != "change_note":
            honoured(reply, field, value)


@SWEEP
@given(body=JSON_VALUES)
def test_any_json_as_the_whole_body_of_a_job(admin, body):
    job = make_job()
    for method, url in (("post", f"{API}/jobs/"), ("patch", f"{API}/jobs/{job.pk}/")):
        sent = set(body) if isinstance(body, dict) else set()
        answered_well(send(admin, method, url, encode(body)), sent)


# -- operator actions -------------------------------------------------------------------------

ACTION_FIELDS = {
    "pause/": ["note"],
    "backfill/": ["start", "end", "dry_run"],
    "resume/": [],
    "run/": [],
    "restore/": [],
}
RUN_ACTIONS = ["retry/", "cancel/"]


@SWEEP
@given(
    endpoint=st.sampled_from([*ACTION_FIELDS, *RUN_ACTIONS, "DELETE"]),
    fields=st.dictionaries(
        st.sampled_from(["note", "start", "end", "dry_run", "bogus", "id", "\ud800"]),
        JSON_VALUES,
        max_size=4,
    ),
    whole=st.none() | JSON_VALUES,
)
def test_any_body_for_an_action(admin, redis_client, endpoint, fields, whole):
    job = make_job()
    slot = timezone.now().replace(microsecond=0) - timedelta(minutes=5)
    run = JobRun.objects.create(
        job=job, scheduled_for=slot, task_id=job.task_id_for(slot), status=RunStatus.FAILED
    )
    body = fields if whole is None else whole
    sent = set(body) if isinstance(body, dict) else set()
    if endpoint == "DELETE":
        response = send(admin, "delete", f"{API}/jobs/{job.pk}/", encode(body))
    elif endpoint in RUN_ACTIONS:
        response = send(admin, "post", f"{API}/runs/{run.pk}/{endpoint}", encode(body))
    else:
        response = send(admin, "post", f"{API}/jobs/{job.pk}/{endpoint}", encode(body))
    if answered_well(response, sent) is not None and isinstance(body, dict):
        allowed = ACTION_FIELDS.get(endpoint, [])
        assert set(body) <= set(allowed), f"{endpoint} accepted {set(body) - set(allowed)}"


# -- bodies no client library would write ---------------------------------------------------

RAW_BODIES = st.one_of(
    DEEP.map(deep_list),
    DEEP.map(deep_object),
    DEEP.map(lambda n: '{"args": ' + deep_list(n) + "}"),
    DEEP.map(lambda n: '{"kwargs": {"a": ' + deep_list(n) + "}}"),
    DEEP.map(lambda n: '{"note": ' + deep_object(n) + "}"),
    st.sampled_from(
        [
            "",
            "null",
            "[]",
            '"text"',
            "{",
            '{"args": [1e400]}',
            '{"args": [NaN]}',
            '{"args": [Infinity]}',
            '{"retry_backoff": 1e400}',
            '{"args": [' + "9" * 5000 + "]}",
            '{"kwargs": {"a": "\\u0000"}}',
            '{"kwargs": {"a\\u0000": 1}}',
            '{"args": ["\\ud800"]}',
            '{"kwargs": {"a": {"\\udfff": 1}}}',
            '{"name": "\\ud800"}',
            '{"\\ud800": 1}',
            '{"catchup_policy": "\\ud800"}',
            '{"catchup_policy": "' + "x" * 100_000 + '"}',
            '{"enabled": "\\ud800"}',
            '{"start_at": "\\ud800"}',
            '{"note": "\\u0000"}',
            '{"start": "\\ud800", "end": []}',
        ]
    ),
    st.binary(max_size=64),
    st.sampled_from([b"\xff\xfe{}", b'{"name": "\xed\xa0\x80"}', b"\x00"]),
)
ENDPOINTS = [
    ("post", "jobs/"),
    ("patch", "jobs/{job}/"),
    ("put", "jobs/{job}/"),
    ("delete", "jobs/{job}/"),
    ("post", "jobs/{job}/pause/"),
    ("post", "jobs/{job}/resume/"),
    ("post", "jobs/{job}/backfill/"),
    ("post", "jobs/{job}/restore/"),
    ("post", "runs/{run}/cancel/"),
]


@SWEEP
@given(raw=RAW_BODIES, endpoint=st.sampled_from(ENDPOINTS))
def test_any_raw_body_to_any_write_endpoint(admin, raw, endpoint):
    job = make_job()
    slot = timezone.now().replace(microsecond=0) - timedelta(minutes=5)
    run = JobRun.objects.create(
        job=job, scheduled_for=slot, task_id=job.task_id_for(slot), status=RunStatus.FAILED
    )
    method, path = endpoint
    response = send(admin, method, f"{API}/{path.format(job=job.pk, run=run.pk)}", raw)
    try:
        sent = set(json.loads(raw))
    except (ValueError, TypeError, RecursionError):
        sent = set()
    answered_well(response, sent)


@SWEEP
@given(
    field=st.sampled_from(["args", "kwargs", "enabled", "pause_note", "priority", "bogus"]),
    # A form cannot carry a lone surrogate (the client cannot encode it); the rest it can.
    value=st.one_of(DEEP.map(deep_list), ODD_TEXT, st.text(max_size=40)).filter(
        lambda text: not any("\ud800" <= c <= "\udfff" for c in text)
    ),
)
def test_any_form_field_of_a_new_job(admin, field, value):
    """A form body: args and kwargs are JSON text, parsed by the field itself."""
    body = {**good_job(), field: value}
    response = admin.post(f"{API}/jobs/", body)  # multipart, as a browser form sends it
    answered_well(response, set(body))
