"""OpenTelemetry spans of a run: the leader's dispatch of its slot, and its execution on a worker,
linked through the message.

Nothing here runs unless ``opentelemetry-api`` is installed (the ``otel`` extra) *and* the
process has a tracer provider (your ``opentelemetry-sdk`` set-up, or ``opentelemetry-instrument``):
the API's default provider records nothing, and a burst of ten thousand runs should not pay for
ten thousand spans nobody keeps.

* ``cluster_cron.dispatch`` (kind PRODUCER, on the leader): from when the leader hands a run's
  message to the dispatcher — or, for a run recorded ahead, prepares it — until the message
  reached the broker. Attributes: the job, slot, trigger, epoch, attempt and, for a run sent at
  its instant, ``cluster_cron.lateness_s``. Its context travels in the message header
  ``cluster_cron_trace`` (a W3C ``traceparent``), its own header so that Celery's instrumentation,
  which writes ``traceparent`` for its publish span, does not overwrite it.
* ``cluster_cron.execute`` (kind CONSUMER, on the worker): the claimed run, from the overlap gate
  to the ledger's record, with the outcome. Its parent is the current span when there is one
  (``opentelemetry-instrumentation-celery``'s span of the task), else the dispatch span; either
  way it carries a link to the dispatch span.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..ledger.outbox import OutboxMessage
from ..wire.celery import TRACE_HEADER

logger = logging.getLogger("django_cluster_cron.tracing")

TRACER = "django_cluster_cron"
HEADER = TRACE_HEADER
_SILENT = {"ProxyTracerProvider", "NoOpTracerProvider"}


def _trace() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


def enabled() -> bool:
    """Whether spans would be recorded: the API is installed and a tracer provider is set."""
    trace = _trace()
    return trace is not None and type(trace.get_tracer_provider()).__name__ not in _SILENT


def _propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def _run_attributes(message: OutboxMessage, epoch: int | None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "cluster_cron.run.id": message.run_id,
        "cluster_cron.job.id": message.job_id,
        "cluster_cron.task": message.task,
        "cluster_cron.slot": message.scheduled_for.isoformat(),
        "cluster_cron.trigger": message.trigger,
        "cluster_cron.attempt": message.attempt,
        "messaging.message.id": message.task_id,
    }
    if epoch is not None:
        found["cluster_cron.epoch"] = epoch
    return found


class DispatchSpans:
    """The leader's open dispatch spans, by run id: started when a run's message is handed over
    (or prepared), ended when it reached the broker or will not."""

    def __init__(self) -> None:
        self.open: dict[int, Any] = {}

    def start(self, messages: Sequence[OutboxMessage], *, epoch: int | None) -> list[OutboxMessage]:
        """The messages, each carrying its new dispatch span's context (unchanged when tracing
        is off)."""
        if not messages or not enabled():
            return list(messages)
        trace = _trace()
        tracer = trace.get_tracer(TRACER)
        propagator = _propagator()
        traced = []
        for message in messages:
            span = tracer.start_span(
                "cluster_cron.dispatch",
                kind=trace.SpanKind.PRODUCER,
                attributes=_run_attributes(message, epoch),
            )
            carrier: dict[str, str] = {}
            propagator.inject(carrier, context=trace.set_span_in_context(span))
            previous = self.open.pop(message.run_id, None)
            if previous is not None:  # prepared before and sent again: the older one is over
                previous.end()
            self.open[message.run_id] = span
            traced.append(dataclasses.replace(message, trace=carrier.get("traceparent", "")))
        return traced

    def end(
        self,
        run_ids: Iterable[int],
        *,
        lateness: Callable[[int], float | None] | None = None,
        error: BaseException | str | None = None,
    ) -> None:
        """End the spans of these runs: sent (with their lateness, if known) or, with
        ``error``, not sent for that reason."""
        if not self.open:
            return
        for run_id in run_ids:
            span = self.open.pop(run_id, None)
            if span is None:
                continue
            late = lateness(run_id) if lateness is not None else None
            if late is not None:
                span.set_attribute("cluster_cron.lateness_s", late)
            if error is not None:
                _set_error(span, error)
            span.end()

    def end_all(self, reason: str) -> None:
        self.end(list(self.open), error=reason)


def _set_error(span: Any, error: BaseException | str) -> None:
    from opentelemetry.trace import Status, StatusCode

    if isinstance(error, BaseException):
        span.record_exception(error)
        error = f"{type(error).__name__}: {error}"
    span.set_status(Status(StatusCode.ERROR, str(error)))


class Execution:
    """What the worker tells its execution span once the run's outcome is known."""

    def __init__(self, span: Any = None) -> None:
        self.span = span

    def ended(self, status: str | None, error: BaseException | None, reason: str) -> None:
        """``status``: what the ledger recorded (None: nothing, the run was no longer this
        attempt's); ``error``/``reason``: why the body did not succeed."""
        if self.span is None:
            return
        self.span.set_attribute("cluster_cron.outcome", status or "not_recorded")
        if status in ("failed", "retrying"):
            _set_error(self.span, error if error is not None else reason)


@contextmanager
def executing(run: Any, traceparent: object) -> Iterator[Execution]:
    """The ``cluster_cron.execute`` span around a claimed run (see the module's docstring);
    ``traceparent``: the message's ``cluster_cron_trace`` header, if any."""
    if not enabled():
        yield Execution()
        return
    trace = _trace()
    dispatched = None
    if isinstance(traceparent, str) and traceparent:
        extracted = _propagator().extract({"traceparent": traceparent})
        context = trace.get_current_span(extracted).get_span_context()
        if context.is_valid:
            dispatched = (extracted, context)
    current = trace.get_current_span().get_span_context()
    parent = None if current.is_valid or dispatched is None else dispatched[0]
    links = [trace.Link(dispatched[1])] if dispatched is not None else []
    job = run.job
    attributes = {
        "cluster_cron.run.id": run.pk,
        "cluster_cron.job.id": job.pk,
        "cluster_cron.job.name": job.name,
        "cluster_cron.task": job.task,
        "cluster_cron.slot": run.scheduled_for.isoformat(),
        "cluster_cron.trigger": run.trigger,
        "cluster_cron.attempt": run.attempt,
        "messaging.message.id": run.task_id,
    }
    if run.epoch is not None:
        attributes["cluster_cron.epoch"] = run.epoch
    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(
        "cluster_cron.execute",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield Execution(span)
