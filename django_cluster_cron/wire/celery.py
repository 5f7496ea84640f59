"""A run's Celery message, as the leader sends it and the worker reads it.

From 0.2 a run goes as its job's own task (name, args, kwargs), with headers naming the run;
:data:`EXECUTE_TASK` with ``(run_id, attempt)`` as its arguments is the form workers before 0.2
run (sent while such workers may be up). Celery puts a message's headers in the request a worker
runs it with, or under ``request.headers`` for ``apply(headers=...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..ledger.outbox import OutboxMessage
from . import RunRef, run_ref

__all__ = [
    "ATTEMPT_HEADER",
    "EXECUTE_TASK",
    "HEADER_PREFIX",
    "PIECE_HEADER",
    "RUN_HEADER",
    "TRACE_HEADER",
    "execute_ref",
    "header",
    "headers_for",
    "headers_ref",
    "named_in_headers",
]

# The task of the message form before 0.2: execute_run(run_id, attempt).
EXECUTE_TASK = "django_cluster_cron.execute_run"

# Every header of ours starts so (Celery copies a request's own attributes into a copy the body
# sends, and these are how a worker knows them).
HEADER_PREFIX = "cluster_cron_"
RUN_HEADER = "cluster_cron_run"
JOB_HEADER = "cluster_cron_job"
SLOT_HEADER = "cluster_cron_slot"
ATTEMPT_HEADER = "cluster_cron_attempt"
EPOCH_HEADER = "cluster_cron_epoch"
TRIGGER_HEADER = "cluster_cron_trigger"
# A piece of the run (its index; -1: the run's completion message): the task id and attempt are
# the piece's own.
PIECE_HEADER = "cluster_cron_piece"
# The leader's dispatch span (a W3C traceparent), its own header so that Celery's
# instrumentation, which owns ``traceparent``, does not overwrite it.
TRACE_HEADER = "cluster_cron_trace"


def headers_for(message: OutboxMessage) -> dict[str, Any]:
    """The headers of ``message``: the run, its job, slot, attempt, the leader's epoch and the
    trigger, and its dispatch trace if it has one."""
    headers: dict[str, Any] = {
        RUN_HEADER: message.run_id,
        JOB_HEADER: message.job_id,
        SLOT_HEADER: message.scheduled_for.isoformat(),
        ATTEMPT_HEADER: message.attempt,
        EPOCH_HEADER: message.epoch,
        TRIGGER_HEADER: message.trigger,
    }
    if message.trace:
        headers[TRACE_HEADER] = message.trace
    if message.piece is not None:
        headers[PIECE_HEADER] = message.piece
    return headers


def header(request: Any, name: str) -> object:
    """A header of the delivered message (``request``: Celery's request, or a mapping of the
    message's headers)."""
    get = getattr(request, "get", None)
    if get is None:
        return None
    value = get(name)
    if value is None:
        headers = get("headers")
        if isinstance(headers, Mapping):
            value = headers.get(name)
    return value


def named_in_headers(request: Any) -> tuple[object, object] | None:
    """The run id and attempt the headers say, as they are (None: a plain task call, no run)."""
    run_id = header(request, RUN_HEADER)
    if run_id is None:
        return None
    return run_id, header(request, ATTEMPT_HEADER)


def headers_ref(request: Any, task_id: object) -> RunRef | None:
    """The run the headers name with ``task_id``, or None when they name none well formed."""
    named = named_in_headers(request)
    return None if named is None else run_ref(*named, task_id)


def execute_ref(args: Any, task_id: object) -> RunRef | None:
    """The run an :data:`EXECUTE_TASK` message names by its arguments ``(run_id, attempt)`` (the
    attempt defaults to 1, as the task's signature says)."""
    found = list(args or ())
    if not found:
        return None
    return run_ref(found[0], found[1] if len(found) > 1 else 1, task_id)
