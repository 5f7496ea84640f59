"""OpenTelemetry spans of a run, recorded by the SDK's in-memory exporter: the leader's dispatch
(sent now, and recorded ahead then sent at its instant) and the worker's execution, linked
through the message — with and without opentelemetry-instrumentation-celery.

The leader runs in process on a test clock against the real database and broker; the message
is taken from the broker's queue and delivered in process as a worker would (Celery's apply).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from django_cluster_cron.celery_app import get_celery_app
from django_cluster_cron.ledger.outbox import OutboxMessage
from django_cluster_cron.models import JobRun, RunStatus
from django_cluster_cron.worker.celery import deliver_here
from tests.support.inprocess import T0, Clock, job, queued_messages

pytestmark = pytest.mark.django_db(transaction=True)

_exporter = InMemorySpanExporter()


@pytest.fixture
def spans():
    """The process's tracer provider (set once: OpenTelemetry allows no second one), its
    finished spans cleared for each test."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


def named(exporter, name):
    return [span for span in exporter.get_finished_spans() if span.name == name]


def traceparent(span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def deliver(raw_message, run):
    """The run's message as the broker holds it, delivered in process as a worker would."""
    headers = raw_message["headers"]
    # Due by the test's clock (2030), not yet by the database's: the claim compares with that.
    JobRun.objects.filter(pk=run.pk).update(due_at=None)
    run = JobRun.objects.select_related("job").get(pk=run.pk)
    message = dataclasses.replace(OutboxMessage.for_run(run), trace=headers["cluster_cron_trace"])
    return deliver_here(get_celery_app(), message)


def test_without_a_tracer_provider_no_span_is_made():
    """The API alone (no SDK set up) records nothing, and the messages go out as they were."""
    probe = (
        "import django; django.setup()\n"
        "from datetime import datetime, timezone\n"
        "from django_cluster_cron.ledger.outbox import OutboxMessage\n"
        "from django_cluster_cron.ops import tracing\n"
        "m = OutboxMessage(1, 'cron-1', 1, datetime.now(timezone.utc), 1, 1, 'schedule', None,"
        " None, None)\n"
        "spans = tracing.DispatchSpans()\n"
        "print(tracing.enabled(), spans.start([m], epoch=1) == [m], spans.open)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "True", "{}"]


def test_a_slot_sent_now_is_a_dispatch_span_and_its_run_an_execute_span(
    spans, make_scheduler, redis_client
):
    clock = Clock(T0 + timedelta(seconds=0.5))
    nightly = job("traced", watermark=T0 - timedelta(seconds=30))
    scheduler = make_scheduler("node-a", clock)
    scheduler.step()

    [dispatch] = named(spans, "cluster_cron.dispatch")
    run = JobRun.objects.get()
    assert dispatch.kind == SpanKind.PRODUCER
    attributes = dict(dispatch.attributes)
    assert attributes["cluster_cron.job.id"] == nightly.pk
    assert attributes["cluster_cron.slot"] == T0.isoformat()
    assert attributes["cluster_cron.trigger"] == "schedule"
    assert attributes["cluster_cron.epoch"] == scheduler.epoch
    assert attributes["messaging.message.id"] == run.task_id
    assert attributes["cluster_cron.lateness_s"] == pytest.approx(0.5, abs=0.01)
    assert dispatch.status.status_code != StatusCode.ERROR

    [raw] = queued_messages(redis_client)
    assert raw["headers"]["cluster_cron_trace"] == traceparent(dispatch)
    assert deliver(raw, run).state == "SUCCESS"

    [execute] = named(spans, "cluster_cron.execute")
    assert execute.kind == SpanKind.CONSUMER
    # No Celery instrumentation: the execution continues the dispatch's trace, and links it.
    assert execute.parent.span_id == dispatch.get_span_context().span_id
    assert execute.context.trace_id == dispatch.context.trace_id
    assert [link.context.span_id for link in execute.links] == [dispatch.context.span_id]
    assert dict(execute.attributes)["cluster_cron.outcome"] == "success"
    assert dict(execute.attributes)["cluster_cron.job.name"] == "traced"


def test_a_run_recorded_ahead_is_traced_from_its_preparation_to_its_instant(
    spans, make_scheduler, redis_client
):
    clock = Clock(T0 - timedelta(seconds=30))
    job("ahead", watermark=T0 - timedelta(seconds=60))
    scheduler = make_scheduler("node-a", clock, lookahead=45.0)
    scheduler.step()
    assert JobRun.objects.get().status == RunStatus.PENDING
    assert not named(spans, "cluster_cron.dispatch")  # open until the message is sent
    clock.now = T0 + timedelta(seconds=0.25)
    scheduler.step()
    [dispatch] = named(spans, "cluster_cron.dispatch")
    assert dict(dispatch.attributes)["cluster_cron.lateness_s"] == pytest.approx(0.25, abs=0.01)
    [raw] = queued_messages(redis_client)
    assert raw["headers"]["cluster_cron_trace"] == traceparent(dispatch)


def test_a_failed_run_is_an_error_span(spans, make_scheduler, redis_client):
    clock = Clock(T0 + timedelta(seconds=0.5))
    job("traced-failure", watermark=T0 - timedelta(seconds=30), args=["x", 1])
    make_scheduler("node-a", clock).step()
    [raw] = queued_messages(redis_client)
    assert deliver(raw, JobRun.objects.get()).state == "FAILURE"
    [execute] = named(spans, "cluster_cron.execute")
    assert execute.status.status_code == StatusCode.ERROR
    assert "TypeError" in execute.status.description
    assert dict(execute.attributes)["cluster_cron.outcome"] == "failed"


def test_with_celerys_instrumentation_the_execution_is_inside_its_task_span(
    spans, make_scheduler, redis_client
):
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    instrumentor = CeleryInstrumentor()
    instrumentor.instrument()
    try:
        clock = Clock(T0 + timedelta(seconds=0.5))
        job("traced-celery", watermark=T0 - timedelta(seconds=30))
        make_scheduler("node-a", clock).step()
        [dispatch] = named(spans, "cluster_cron.dispatch")
        [raw] = queued_messages(redis_client)
        assert deliver(raw, JobRun.objects.get()).state == "SUCCESS"
    finally:
        instrumentor.uninstrument()
    [execute] = named(spans, "cluster_cron.execute")
    [celery_run] = [s for s in spans.get_finished_spans() if s.name.startswith("run/")]
    assert celery_run.name == "run/tests.add"
    # Celery's span of the task is the parent; the dispatch is still linked.
    assert execute.parent.span_id == celery_run.context.span_id
    assert [link.context.span_id for link in execute.links] == [dispatch.context.span_id]
