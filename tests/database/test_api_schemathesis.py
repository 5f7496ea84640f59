"""The API against its own OpenAPI schema, driven by a client we did not write: schemathesis.

Every operation of the generated schema gets generated requests — valid and invalid bodies and
parameters — through Django's WSGI application, as a superuser, with a few real jobs and runs in
the database for the path ids to hit. Every response must be documented (status, content type,
body schema, headers), no request may cause a 5xx, invalid data must be refused, and a deleted
resource must stay gone.

Left out, on purpose: ``positive_data_acceptance`` (a schema-valid body is refused when its cron,
time zone or task is not a real one — the schema cannot say "a registered Celery task"), and the
5xx check on the health operation, whose documented answer while no scheduler leads is 503, and
``ignored_auth``: the credentials are sent outside schemathesis's own auth handling, so its
"invalid credentials" requests still carry valid ones (unauthenticated access is tested in
test_api.py). A Host header the negative mode generates is dropped: Django answers a bad one
before the API is reached.
"""

from __future__ import annotations

import base64
import os
from datetime import timedelta

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "25"))
AUTH = {"Authorization": "Basic " + base64.b64encode(b"schema:checker").decode()}


@pytest.fixture
def api_schema(transactional_db, settings, redis_client):
    from django.core.wsgi import get_wsgi_application

    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": "schemathesis"}
    make_world()  # the superuser: the schema is for logged-in users
    return schemathesis.openapi.from_wsgi(
        "/cron/api/schema/?format=json", get_wsgi_application(), headers=AUTH
    )


def make_world():
    """A superuser for Basic auth, and jobs and runs for small ids to find."""
    if not User.objects.filter(username="schema").exists():
        User.objects.create_superuser("schema", "s@example.com", "checker")
    for i in range(3):
        name = f"schema-{i}"
        if JobDefinition.all_objects.filter(name=name).exists():
            continue
        job = JobDefinition(
            name=name, cron="0 3 * * *", timezone="UTC", task="tests.add", args=[1, 2]
        )
        job.full_clean()
        job.save()
        slot = timezone.now().replace(microsecond=0) - timedelta(hours=i + 1)
        JobRun.objects.create(
            job=job,
            scheduled_for=slot,
            task_id=job.task_id_for(slot),
            status=RunStatus.FAILED if i % 2 else RunStatus.QUEUED,
            trigger=RunTrigger.SCHEDULE,
        )


def operations(schema):
    found = [result.ok() for result in schema.get_all_operations()]
    assert len(found) >= 15, [op.label for op in found]
    return found


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_operation_answers_as_documented(api_schema, mode):
    """Each operation, generated cases of one mode; the checks of ``call_and_validate``."""
    make_world()
    tried: dict[str, int] = {}
    failures: list[str] = []
    for operation in operations(api_schema):
        label = operation.label

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
        def run(case):
            make_world()  # a DELETE may have soft-deleted a job the next case needs
            # A generated Host header is Django's to judge (ALLOWED_HOSTS, and a name that is no
            # host name) before any view runs: its 400 page is the project's, not the API's, and
            # no schema of ours can document it.
            case.headers.pop("host", None)
            tried[case.operation.label] = tried.get(case.operation.label, 0) + 1
            excluded = [positive_data_acceptance, ignored_auth]
            if case.operation.label == "GET /cron/api/health/":
                # 503 is its documented answer while no scheduler leads (none runs here).
                excluded.append(not_a_server_error)
            case.call_and_validate(headers=AUTH, excluded_checks=excluded)

        try:
            run()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # schemathesis raises a group: collect, then fail once
            failures.append(f"{label}: {exc}")
    print(f"schemathesis {mode.value}: {sum(tried.values())} cases over {len(tried)} operations")
    assert not failures, "\n\n".join(failures)


def test_chained_calls_answer_as_documented(api_schema):
    """Stateful: schemathesis chains operations with the ids they return (links it infers from the
    schema: a created job's id goes on to read, update, pause, run, back-fill and delete it; a
    run's id to retry and cancel it), with the same checks as above."""
    make_world()
    machine = api_schema.as_state_machine()
    links = sum(len(transitions) for transitions in _links(api_schema).values())
    assert links >= 10, "schemathesis inferred too few links to chain anything"
    steps: list[str] = []

    class Chains(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case):
            return {"headers": AUTH}

        def before_call(self, case):
            steps.append(case.operation.label)

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            excluded = [positive_data_acceptance, ignored_auth]
            if case.operation.label == "GET /cron/api/health/":
                excluded.append(not_a_server_error)
            case.validate_response(response, excluded_checks=excluded, headers=AUTH)

    Chains.run(
        settings=settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            stateful_step_count=6,
        )
    )
    print(f"schemathesis stateful: {len(steps)} calls, {links} inferred links")
    assert len(set(steps)) >= 5  # the chains reached more than the entry points


def _links(schema) -> dict[str, list[str]]:
    """Operation -> the operations its responses link to, as the state machine will use them."""
    found: dict[str, list[str]] = {}
    for path, item in schema.raw_schema.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict):
                continue
            for response in operation.get("responses", {}).values():
                for link in (response.get("links") or {}).values():
                    target = link.get("operationId") or link.get("operationRef", "")
                    found.setdefault(f"{method.upper()} {path}", []).append(target)
    return found
