"""A run delivered by a ``django.tasks`` backend: the body of the wrapper task it runs.

Whatever the backend (django-tasks-db's ``db_worker``, RQ, the immediate backend), the wrapper
(defined in :mod:`django_cluster_cron.djtasks`, where backends find it by its path):

1. drops a message past the job's ``expires`` (the run is recorded ``missed``:
   :func:`django_cluster_cron.ledger.transitions.discarded`);
2. takes the run before anything else (:func:`.run.take`), keeping the backend's result id on
   it; a copy that loses the claim (the outbox sent it again, the backend delivered it twice)
   runs nothing and returns ``{"not_run": <why>}``;
3. carries out the job's task — its function, called in this process with the job's arguments
   (and the wrapper's context, for a task that takes one) — and records how it ended
   (:func:`.run.carry_out`);
4. ends as the backend should show it: a return is a successful result whose value is the
   task's return value (its ``repr`` if that is not JSON); a failure, retried by the job's
   policy or final, re-raises the task's exception, so the backend marks that attempt failed
   with the task's own error and traceback; a run whose body did not run (skipped, missed)
   returns ``{"not_run": <why>}``.

A worker forced to stop in the middle of a run (a second signal to ``db_worker``) writes
nothing: the run is declared lost by the leader when its heartbeat stops, and the job's
``on_worker_lost`` decides what follows.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Callable, Mapping
from typing import Any

from django.db import connections, router
from django.utils import timezone
from django.utils.module_loading import import_string

from ..dispatch import tasks_dispatcher
from ..djtasks_app import framework_of, resolve_task
from ..ledger import transitions
from ..ledger.outbox import OutboxMessage
from ..ledger.statements import use_own_connection
from ..models import COMPLETION, JobRun, RunCancelled, RunStatus
from ..wire import RunRef, piece_index
from ..wire.djtasks import WRAPPERS, expires_of, kwargs_ref, wrapper_kwargs
from .claim import with_fresh_connection, worker_name
from .outcome import Delivery, Ending, Outcome
from .pieces import carry_out_piece, take_piece
from .record import partial_outcome
from .run import carry_out, take

__all__ = ["NOT_RUN", "deliver_here", "run"]

logger = logging.getLogger("django_cluster_cron.worker")

# The key of what the wrapper returns for a delivery it did not run.
NOT_RUN = "not_run"


def _stopping_check() -> Callable[[], bool]:
    """Whether this process is being stopped, as seen from the end of a run: ``db_worker``
    puts back the default SIGTERM handler just before it ends a task it was forced to stop."""
    before = signal.getsignal(signal.SIGTERM)

    def stopping() -> bool:
        now = signal.getsignal(signal.SIGTERM)
        return before not in (signal.SIG_DFL, None) and now == signal.SIG_DFL

    return stopping


def _returnable(result: Any) -> Any:
    """What the backend can store of the task's return value: itself, or its repr."""
    try:
        json.dumps(result)
    except (TypeError, ValueError):
        return repr(result)
    return result


def _on_own_connection() -> bool:
    """Claim and record on this thread's own connection, as a Celery worker does — unless the
    task runs inside the enqueuing transaction (the immediate backend in a test), whose rows
    only that transaction's connection sees. Returns the choice in use before (restored after
    the run: the immediate backend runs in processes that are no worker)."""
    alias = router.db_for_write(JobRun)
    return use_own_connection(not connections[alias].in_atomic_block)


def run(context: Any, named: Mapping[str, Any]) -> Any:
    """The wrapper's body (see the module): ``context`` is the backend's TaskContext, ``named``
    the keyword arguments the leader enqueued it with."""
    previous = _on_own_connection()
    try:
        return _run(context, named)
    finally:
        _leave_connections_usable()
        use_own_connection(previous)  # this process's choice, as it was


def _leave_connections_usable() -> None:
    """Close a database connection the task left broken (the server cut it, say), as Django
    does between requests, so that the backend's worker reconnects to record the result instead
    of failing on it (django-tasks-db's db_worker exits then). Never one inside a transaction:
    the enqueuing one, on the immediate backend."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def _end(outcome: Outcome, status: str | None) -> Any:
    """End as the backend should show the run's outcome (see the module)."""
    if status == RunStatus.CANCELLED:
        # django.tasks has no cancelled state: the attempt fails with RunCancelled, saying
        # what the body had done (the ledger says cancelled).
        raise RunCancelled(partial_outcome(outcome))
    if outcome.ending in (Ending.SUCCESS, Ending.SPLIT):
        return _returnable(outcome.result)
    if not outcome.body_ran:
        return {NOT_RUN: outcome.reason}
    if outcome.error is None:  # refused before the body ran (an invalid job definition)
        raise RuntimeError(outcome.reason)
    raise outcome.error


def _run(context: Any, named: Mapping[str, Any]) -> Any:
    ref = kwargs_ref(named)
    if ref is None:
        logger.warning(
            "run.rejected_message task=run_scheduled_job arguments=%r: run, attempt and task_id "
            "must name a run",
            dict(named),
        )
        return {NOT_RUN: "not a run's message: its run, attempt or task_id is malformed"}
    expires = expires_of(named)
    if expires is not None and expires < timezone.now():
        status = with_fresh_connection(
            lambda: transitions.discarded(
                ref.run_id, ref.task_id, ref.attempt, terminated=False, expired=True, signum=None
            )
        )
        if status is not None:
            logger.warning("run.expired run=%s task_id=%s", ref.run_id, ref.task_id)
        return {NOT_RUN: "its message expired before a worker took it (the job's expires)"}
    if "piece" in named:
        return _piece(context, named, ref)
    result_id = str(getattr(context.task_result, "id", "") or "")[:64]
    claimed = take(ref, result_id, pool="django.tasks")
    if claimed is None:
        return {NOT_RUN: f"run {ref.run_id}: another delivery has it, or it no longer waits"}
    job = claimed.job
    outcome, status = carry_out(
        _delivery(named), claimed, _caller(context, job.task, job.args, claimed.task_kwargs())
    )
    return _end(outcome, status)


def _delivery(named: Mapping[str, Any]) -> Delivery:
    return Delivery(
        dispatcher=tasks_dispatcher, traceparent=named.get("trace"), terminating=_stopping_check()
    )


def _caller(context: Any, task: str, args: Any, kwargs: Any) -> Callable[[], Any]:
    """The body: ``task``'s function, called here with ``args`` and ``kwargs`` (and the
    wrapper's context, for a task that takes one)."""

    def call() -> Any:
        body = resolve_task(task)
        if body is None:
            raise LookupError(f"{task!r} is not a django.tasks task on worker {worker_name()}")
        if body.takes_context:
            return body.call(context, *args, **kwargs)
        return body.call(*args, **kwargs)

    return call


def _piece(context: Any, named: Mapping[str, Any], ref: RunRef) -> Any:
    """A piece's message: take the piece, run the job's task (the completion message: its
    ``on_complete`` task with the summary), record, end as a run does."""
    index = piece_index(named.get("piece"))
    if index is None:
        return {NOT_RUN: "not a piece's message: its piece is malformed"}
    piece = take_piece(ref, index, pool="django.tasks")
    if piece is None:
        return {NOT_RUN: f"run {ref.run_id} piece {index}: another delivery has it"}
    job = piece.run.job
    if index == COMPLETION:
        call = _caller(context, job.on_complete, (), {"summary": piece.key})
    else:
        call = _caller(context, job.task, job.args, piece.run.task_kwargs())
    outcome, status = carry_out_piece(_delivery(named), piece, call)
    return _end(outcome, status)


def deliver_here(message: OutboxMessage) -> Any:
    """Run a run's message in this process, as a backend's worker would: the wrapper on an
    immediate backend of the task's framework (a real task context; nothing is queued). For
    tests, ``django_cluster_cron.testing.run_due``. The backend's TaskResult."""
    task = resolve_task(message.task)
    framework = framework_of(task)
    if task is None or framework is None:
        raise LookupError(f"{message.task!r} does not name a django.tasks task")
    immediate = import_string(f"{framework.package}.backends.immediate.ImmediateBackend")
    backend = immediate(task.backend, {})
    wrapper = import_string(WRAPPERS[framework.package])
    return backend.enqueue(wrapper, [], wrapper_kwargs(message))
