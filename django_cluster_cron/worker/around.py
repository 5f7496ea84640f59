"""The job's own task, with the run's guarantees around its call.

The leader sends a run as its job's own Celery task (name, args, kwargs) with headers naming the
run. So that every Celery tool sees that task — the worker log, events and Flower, result
backends, the task signals, Sentry's and OpenTelemetry's Celery integrations, the task's own
time limits and rate limit — the worker runs it as Celery runs any task; what makes it a
scheduled run is a wrapper around the task's call, installed on *every* task class the worker
has (third-party tasks included, which no base class could reach):

* a call without the run headers (``delay()``, a direct call, a chain) passes straight through;
* with them, the wrapper claims the run first (:mod:`.claim`): a copy that loses the claim
  raises Celery's ``Ignore`` — Celery logs and reports it as ignored, never as a second
  execution or a success — and the winner runs the body under the overlap gate and heartbeat,
  with :func:`~django_cluster_cron.worker.execute.current_run` set;
* how the body ended is recorded in the ledger first, then shown to Celery as the same thing: a
  return is SUCCESS with its result; a failure the job retries is RETRY (the next attempt is
  already published, as the same task id); a final failure re-raises the body's exception, so
  Celery marks FAILURE, ``task_failure`` fires and error trackers see it; a run skipped by the
  overlap policy is ignored.

Celery builds a task's tracer (which decides whether the class's own ``__call__`` is used)
when the worker starts and again in each pool process, so the wrapper is installed on the
classes before both (``worker_init``) and tracers that already exist are rebuilt
(:func:`install`).
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.exceptions import Ignore, MaxRetriesExceededError, Reject, Retry

from ..dispatch.celery.sender import headers_for
from ..ledger.outbox import OutboxMessage
from ..models import RunStatus
from .claim import is_id, message_header
from .execute import carry_out, celery_delivery, take

logger = logging.getLogger("django_cluster_cron.worker")

# Header names the leader sets on a run's message (see dispatch.celery.sender.headers_for).
RUN_HEADER = "cluster_cron_run"
ATTEMPT_HEADER = "cluster_cron_attempt"

# The task id whose run this context is executing: a task that calls itself as a function
# inside its run (Celery copies the request for that call, id and headers included) goes
# straight to its body.
_running: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "cluster_cron_running_task", default=None
)
HEADER_PREFIX = "cluster_cron_"


def run_headers(request: Any) -> tuple[object, object] | None:
    """The run id and attempt a delivered message names, or None for a plain task call."""
    run_id = message_header(request, RUN_HEADER)
    if run_id is None:
        return None
    return run_id, message_header(request, ATTEMPT_HEADER)


def _around(call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        named = None if request.called_directly else run_headers(request)
        if named is None or _running.get() == request.id:
            return call(self, *args, **kwargs)
        return run_delivered(self, named, lambda: call(self, *args, **kwargs))

    __call__.__cluster_cron__ = True  # type: ignore[attr-defined]
    return __call__


def run_delivered(task: Any, named: tuple[object, object], body: Callable[[], Any]) -> Any:
    """A delivered run's message: claim, run ``body``, record, and end as Celery should see."""
    run_id, attempt = named
    task_id = task.request.id
    if not (is_id(run_id) and is_id(attempt) and task_id):
        logger.warning(
            "run.rejected_message task=%s task_id=%s run=%r attempt=%r: run id and attempt "
            "must be positive integers",
            task.name,
            task_id,
            run_id,
            attempt,
        )
        raise Ignore("not a message of a run: its run headers are malformed")
    assert isinstance(run_id, int)
    assert isinstance(attempt, int)
    run = take(run_id, str(task_id), attempt)
    if run is None:
        raise Ignore(f"run {run_id}: another delivery of this message has the run")
    request = task.request
    _keep_headers_on_copies(request)
    token = _running.set(str(task_id))
    try:
        outcome, status = carry_out(celery_delivery(task), run, body)
    finally:
        _running.reset(token)
    if outcome.kind == "success":
        return outcome.result
    if outcome.kind in ("skipped", "missed"):  # the body did not run
        raise Ignore(outcome.reason)
    error = outcome.error
    if status == RunStatus.RETRYING:
        raise Retry(exc=error if isinstance(error, Exception) else None, when=run.retry_at)
    if isinstance(error, Reject):
        raise Reject(getattr(error, "reason", None), requeue=False)
    if isinstance(error, Retry):  # the body asked Celery to retry; the job's retries are spent
        error = MaxRetriesExceededError(f"the task asked to retry: {error}")
    if error is None:  # refused before the body ran (an invalid job definition)
        error = RuntimeError(outcome.reason)
    raise error


def _keep_headers_on_copies(request: Any) -> None:
    """Make a copy of this message that the body itself sends (``self.retry()``, Celery's
    ``autoretry_for``) carry the run's headers: the copy then loses the claim and is dropped,
    instead of running the task again outside the ledger. A retry the body asks for is a
    failure the job's retry policy handles."""
    get = getattr(request, "get", None)
    found = getattr(request, "__dict__", {})
    ours = {k: v for k, v in found.items() if k.startswith(HEADER_PREFIX)}
    if ours and get is not None:
        request.headers = {**(get("headers") or {}), **ours}


def _wrapped(task_class: type) -> bool:
    return bool(getattr(task_class.__call__, "__cluster_cron__", False))


def install(app: Celery, hostname: str | None = None) -> int:
    """Wrap the call of every task the app has (once per class) and rebuild the tracers Celery
    already built for them; the number of classes wrapped now."""
    from celery.app.trace import build_tracer

    wrapped = 0
    for name, task in list(app.tasks.items()):
        if name.startswith(("celery.", "django_cluster_cron.")):
            # Celery's own tasks are never a job's; this app's execute_run claims by itself.
            continue
        task_class = type(task)
        if not _wrapped(task_class):
            task_class.__call__ = _around(task_class.__call__)  # type: ignore[method-assign]
            wrapped += 1
        if getattr(task, "__trace__", None) is not None:
            task.__trace__ = build_tracer(name, task, app.loader, hostname, app=app)
    return wrapped


def deliver_here(app: Celery, message: OutboxMessage, **options: Any) -> Any:
    """Deliver a run's message in this process, as a worker would (Celery's ``apply``, with the
    wrapper installed): for tests, ``django_cluster_cron.testing.run_due``. Celery's result."""
    install(app)
    task = app.tasks[message.task]
    return task.apply(
        args=message.args,
        kwargs=message.kwargs,
        task_id=message.task_id,
        headers=headers_for(message),
        **options,
    )
