"""What a ``django.tasks`` backend's worker runs for a scheduled run: the wrapper task.

Every run of a job whose task is a ``django.tasks`` task is enqueued on that task's backend as
``run_scheduled_job`` (``run_scheduled_job_backport`` for tasks of the ``django-tasks``
backport), with keyword arguments naming the run (:mod:`django_cluster_cron.dispatch.djtasks`).
Whatever the backend (django-tasks-db's ``db_worker``, RQ, the immediate backend), the wrapper:

1. drops a message past the job's ``expires`` (the run is recorded ``missed``);
2. **claims** the run before anything else (:mod:`django_cluster_cron.worker.claim`), keeping the
   backend's result id on it; a copy that loses the claim (the outbox sent it again, the backend
   delivered it twice) runs nothing and returns ``{"not_run": <why>}``;
3. runs the job's task — its function, called in this process with the job's arguments (and the
   wrapper's context, for a task that takes one) — under the overlap gate and the heartbeat, with
   :func:`~django_cluster_cron.worker.execute.current_run` set;
4. records how it ended in the ledger, then ends as the backend should show it: a return is a
   successful result whose value is the task's return value (its ``repr`` if that is not JSON);
   a failure, retried by the job's policy or final, re-raises the task's exception, so the
   backend marks that attempt failed with the task's own error and traceback; a run the overlap
   policy skipped returns ``{"not_run": <why>}``.

A backend's own tools (django-tasks-db's admin, ``get_result``) therefore show this wrapper's path
for every scheduled run, and its keyword arguments say whose run it is: ``job``, ``task``,
``slot``, ``run`` and ``attempt``.

A worker forced to stop in the middle of a run (a second signal to ``db_worker``) writes nothing:
the run is declared lost by the leader when its heartbeat stops, and the job's
``on_worker_lost`` decides what follows.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from django.db import connections, router
from django.utils import timezone
from django.utils.module_loading import import_string

from .dispatch.djtasks import WRAPPERS, TasksDispatcher, wrapper_kwargs
from .djtasks_app import Framework, framework_of, frameworks, resolve_task
from .ledger.outbox import OutboxMessage
from .ledger.statements import use_own_connection
from .ledger.transitions import record_discarded
from .models import JobRun
from .worker.claim import is_id, with_fresh_connection, worker_name
from .worker.execute import carry_out, take
from .worker.record import Delivery

__all__ = ["NOT_RUN", "deliver_here", "run_scheduled_job", "run_scheduled_job_backport"]

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


def _expired(named: Mapping[str, Any]) -> bool:
    expires = named.get("expires")
    if not isinstance(expires, str):
        return False
    try:
        deadline = datetime.fromisoformat(expires)
    except ValueError:
        return False
    return timezone.is_aware(deadline) and deadline < timezone.now()


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


def _run(context: Any, named: Mapping[str, Any]) -> Any:
    run_id, attempt, task_id = named.get("run"), named.get("attempt"), named.get("task_id")
    if not (is_id(run_id) and is_id(attempt) and isinstance(task_id, str) and task_id):
        logger.warning(
            "run.rejected_message task=run_scheduled_job arguments=%r: run, attempt and task_id "
            "must name a run",
            dict(named),
        )
        return {NOT_RUN: "not a run's message: its run, attempt or task_id is malformed"}
    assert isinstance(run_id, int)
    assert isinstance(attempt, int)
    if _expired(named):
        status = with_fresh_connection(
            lambda: record_discarded(
                run_id, task_id, attempt, terminated=False, expired=True, signum=None
            )
        )
        if status is not None:
            logger.warning("run.expired run=%s task_id=%s", run_id, task_id)
        return {NOT_RUN: "its message expired before a worker took it (the job's expires)"}
    result_id = str(getattr(context.task_result, "id", "") or "")[:64]
    claimed = take(run_id, task_id, attempt, result_id)
    if claimed is None:
        return {NOT_RUN: f"run {run_id}: another delivery has it, or it no longer waits"}
    job = claimed.job

    def call() -> Any:
        body = resolve_task(job.task)
        if body is None:
            raise LookupError(f"{job.task!r} is not a django.tasks task on worker {worker_name()}")
        if body.takes_context:
            return body.call(context, *job.args, **job.kwargs)
        return body.call(*job.args, **job.kwargs)

    delivery = Delivery(
        dispatcher=TasksDispatcher, traceparent=named.get("trace"), terminating=_stopping_check()
    )
    outcome, _status = carry_out(delivery, claimed, call)
    if outcome.kind == "success":
        return _returnable(outcome.result)
    if outcome.kind in ("skipped", "missed"):  # the body did not run
        return {NOT_RUN: outcome.reason}
    if outcome.error is None:  # refused before the body ran (an invalid job definition)
        raise RuntimeError(outcome.reason)
    raise outcome.error


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


def _define(framework: Framework, function: Callable[..., Any]) -> Any:
    """``function`` as a task of ``framework``, on the default backend if there is one (a
    backend's worker binds it to its own backend when it runs it)."""
    try:
        return framework.task(takes_context=True)(function)
    except framework.invalid_backend:
        aliases = list(getattr(framework.backends, "settings", {}) or {})
        if not aliases:
            raise
        return framework.task(takes_context=True, backend=aliases[0])(function)


def _framework(package: str) -> Framework | None:
    return next((f for f in frameworks() if f.package == package), None)


def run_scheduled_job(context: Any, **named: Any) -> Any:
    return run(context, named)


def run_scheduled_job_backport(context: Any, **named: Any) -> Any:
    return run(context, named)


_django, _backport = _framework("django.tasks"), _framework("django_tasks")
# Module attributes named as their functions: a backend finds a task by its function's path.
if _django is not None:
    run_scheduled_job = _define(_django, run_scheduled_job)
if _backport is not None:
    try:
        run_scheduled_job_backport = _define(_backport, run_scheduled_job_backport)
    except Exception as exc:
        if _django is None:
            raise
        # The backport beside Django's own framework, on backends it cannot load: its tasks
        # cannot be scheduled, Django's can.
        logger.warning("djtasks.backport_unavailable error=%s", exc)
