"""A run delivered by Celery: the job's own task with the run's guarantees around its call.

The leader sends a run as its job's own Celery task (name, args, kwargs) with headers naming the
run (:mod:`django_cluster_cron.wire.celery`). So that every Celery tool sees that task — the
worker log, events and Flower, result backends, the task signals, Sentry's and OpenTelemetry's
Celery integrations, the task's own time limits and rate limit — the worker runs it as Celery
runs any task; what makes it a scheduled run is a wrapper around the task's call, installed on
*every* task class the worker has (third-party tasks included, which no base class could reach):

* a call without the run headers (``delay()``, a direct call, a chain) passes straight through;
* with them, the wrapper takes the run (:func:`.run.take`): a copy that loses the claim raises
  Celery's ``Ignore`` — Celery logs and reports it as ignored, never as a second execution or a
  success — and the winner is carried out and recorded (:func:`.run.carry_out`);
* it then ends as Celery should see it: a return is SUCCESS with its result; a failure the job
  retries is RETRY (the next attempt is already published, as the same task id); a final failure
  re-raises the body's exception, so Celery marks FAILURE, ``task_failure`` fires and error
  trackers see it; a run that did not execute its body (skipped, missed) is ignored.

Celery's own exceptions read as outcomes (the ladder, :func:`_judge`): ``Ignore`` is a skip,
``Reject`` a failure no retry fixes (retried only if it asked to be requeued), ``Retry`` a
failure the job's policy retries. Messages in the form before 0.2 (``execute_run(run_id,
attempt)``) go through :func:`execute`; messages Celery drops before they run (revoked, expired,
an unknown task) are recorded by :func:`on_revoked` and :func:`on_unknown`.

Celery builds a task's tracer (which decides whether the class's own ``__call__`` is used) when
the worker starts and again in each pool process, so the wrapper is installed on the classes
before both (``worker_init``) and tracers that already exist are rebuilt (:func:`install`).
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable
from typing import Any, NoReturn

from celery import Celery
from celery.backends.base import DisabledBackend
from celery.exceptions import (
    Ignore,
    MaxRetriesExceededError,
    Reject,
    Retry,
    SoftTimeLimitExceeded,
)

from ..celery_app import pool_name
from ..dispatch import celery_dispatcher
from ..ledger import transitions
from ..ledger.outbox import OutboxMessage
from ..models import RunStatus
from ..ops import metrics
from ..wire import RunRef, piece_index
from ..wire.celery import (
    EXECUTE_TASK,
    HEADER_PREFIX,
    PIECE_HEADER,
    TRACE_HEADER,
    execute_ref,
    header,
    headers_for,
    headers_ref,
    named_in_headers,
)
from .claim import QUICK_BUDGET, with_fresh_connection, worker_name
from .outcome import Delivery, Ending, Outcome, failure
from .pieces import carry_out_piece, take_piece
from .record import OUTCOMES
from .run import carry_out, take

logger = logging.getLogger("django_cluster_cron.worker")

# The task id whose run this context is executing: a task that calls itself as a function
# inside its run (Celery copies the request for that call, id and headers included) goes
# straight to its body.
_running: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "cluster_cron_running_task", default=None
)


class CalledDirectly(RuntimeError):
    """``execute_run`` was called as a function (a job scheduling it), not delivered by Celery."""


def _judge(exc: Exception) -> Outcome | None:
    """Celery's exceptions raised by a run's body, as outcomes (None: an ordinary failure)."""
    if isinstance(exc, Ignore):
        # The task chose not to do its work (Celery's Ignore, also raised by Task.replace).
        return Outcome(Ending.SKIPPED, reason=f"the task raised Ignore: {exc}".rstrip(": "))
    if isinstance(exc, Reject):
        # Reject(requeue=True) asks to be tried again later: an ordinary failure, retried by
        # the job's policy. Without requeue the task refuses the work: failed, no retry.
        return failure(exc, Ending.FAILURE if getattr(exc, "requeue", False) else Ending.FINAL)
    if isinstance(exc, Retry):
        # self.retry() or autoretry_for: a failure, retried by the job's policy (the copy
        # Celery sent loses the claim). The error is the one the task retried for, if it said.
        found = failure(exc)
        if isinstance(exc.exc, Exception):
            found.error = exc.exc
        return found
    return None


def _terminate_signal_handled() -> bool:
    """Has billiard's handler for a terminate signal run in this process? It raises SystemExit
    in whatever the process was doing, so an exception seen after it is the process ending."""
    from billiard import common

    fired = getattr(common, "terminate_handler_fired", None)
    if fired is not None:
        return bool(fired())
    return bool(getattr(common, "_should_have_exited", [False])[0])  # billiard < 4.3


# How this worker runs tasks (set at worker_init, inherited by prefork's pool processes): kept
# on each run it claims, so a cancel knows whether the run can be terminated.
_pool = [""]


def remember_pool(worker: Any) -> None:
    """Celery's ``worker_init``: note the worker's pool (``worker.pool_cls``)."""
    _pool[0] = pool_name(getattr(worker, "pool_cls", None) or "")


def delivery(task: Any) -> Delivery:
    """A run delivered by Celery as ``task``: its next attempt goes the same way (the same
    message form: a worker that received the job's own task knows the leader found every worker
    able to run that form), and billiard's terminate handler says when the process is ending."""
    return Delivery(
        dispatcher=lambda: celery_dispatcher(task.app, own_task=task.name != EXECUTE_TASK),
        traceparent=header(task.request, TRACE_HEADER),
        terminating=_terminate_signal_handled,
        judge=_judge,
        record_again=(SoftTimeLimitExceeded,),
    )


def _cancelled(task: Any, run: Any) -> NoReturn:
    """End a cancelled run as Celery shows a revoked task: REVOKED in the result backend and a
    ``task-revoked`` event (Flower shows the task REVOKED), then ``Ignore``, so no SUCCESS or
    FAILURE follows."""
    request = task.request
    reason = run.error or "cancelled"
    if not isinstance(task.backend, DisabledBackend):
        try:
            task.backend.mark_as_revoked(request.id, reason, request=request)
        except Exception as exc:  # the ledger has it; a result backend away loses only this
            logger.warning("run.revoked_state_not_stored run=%s error=%s", run.pk, exc)
    if getattr(request, "hostname", None):  # delivered by a worker (not apply())
        try:
            task.send_event("task-revoked", terminated=False, signum=None, expired=False)
        except Exception as exc:
            logger.warning("run.revoked_event_not_sent run=%s error=%s", run.pk, exc)
    raise Ignore(reason)


def _end(task: Any, run: Any, outcome: Outcome, status: str | None) -> Any:
    """End as Celery should see the run's outcome (see the module)."""
    if status == RunStatus.CANCELLED:
        _cancelled(task, run)
    if outcome.ending in (Ending.SUCCESS, Ending.SPLIT):
        return outcome.result
    if not outcome.body_ran:
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


def _rejected(task: Any, named: object) -> None:
    logger.warning(
        "run.rejected_message task=%s task_id=%s named=%r: run id and attempt must be positive "
        "integers",
        task.name,
        task.request.id,
        named,
    )


def run_delivered(task: Any, body: Callable[[], Any]) -> Any:
    """A delivered run's message (its headers name the run): take, carry out ``body``, record,
    and end as Celery should see it."""
    request = task.request
    ref = headers_ref(request, request.id)
    named_piece = header(request, PIECE_HEADER)
    index = piece_index(named_piece)
    if ref is None or (named_piece is not None and index is None):
        _rejected(task, named_in_headers(request))
        raise Ignore("not a message of a run: its run headers are malformed")
    if index is not None:
        return _piece_delivered(task, body, ref, index)
    run = take(ref, pool=_pool[0])
    if run is None:
        raise Ignore(f"run {ref.run_id}: another delivery of this message has the run")
    _keep_headers_on_copies(request)
    token = _running.set(str(request.id))
    try:
        outcome, status = carry_out(delivery(task), run, body)
    finally:
        _running.reset(token)
    return _end(task, run, outcome, status)


def _piece_delivered(task: Any, body: Callable[[], Any], ref: RunRef, index: int) -> Any:
    """A piece's message (the job's own task, or the completion task): take the piece, carry
    it out, record it, and end as Celery should see it, as a run does."""
    piece = take_piece(ref, index, pool=_pool[0])
    if piece is None:
        raise Ignore(f"run {ref.run_id} piece {index}: another delivery has it")
    _keep_headers_on_copies(task.request)
    token = _running.set(str(task.request.id))
    try:
        outcome, status = carry_out_piece(delivery(task), piece, body)
    finally:
        _running.reset(token)
    return _end(task, piece, outcome, status)


def execute(task: Any, ref: RunRef | None, named: object) -> None:
    """``execute_run(run_id, attempt)``: the message form of workers before 0.2, still sent
    while such workers may be up (``ref``: the run its arguments name, None if they name none).
    Calls the job's task in-process once it owns the run; a failure is recorded, not raised
    (the form's contract)."""
    if getattr(task.request, "called_directly", False):
        # A job whose task is execute_run itself would call it here with the job's arguments:
        # fail that job's run loudly instead of "succeeding" without running anything.
        raise CalledDirectly(
            "django_cluster_cron.execute_run runs a run the scheduler recorded and is delivered "
            "by Celery; it cannot be called as a function or scheduled as a job's task."
        )
    if ref is None:
        # Not a message the scheduler sends (a forged or corrupted one): acknowledge, ignore.
        _rejected(task, named)
        return
    run = take(ref, pool=_pool[0])
    if run is None:
        return

    def call() -> Any:
        job = run.job
        body = task.app.tasks.get(job.task)
        if body is None:
            raise LookupError(f"task {job.task!r} is not registered on worker {worker_name()}")
        return body(*job.args, **run.task_kwargs())

    carry_out(delivery(task), run, call)


def _around(call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        named = None if request.called_directly else named_in_headers(request)
        if named is None or _running.get() == request.id:
            return call(self, *args, **kwargs)
        return run_delivered(self, lambda: call(self, *args, **kwargs))

    __call__.__cluster_cron__ = True  # type: ignore[attr-defined]
    return __call__


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


# -- messages Celery dropped ---------------------------------------------------------------------


def on_revoked(ref: RunRef | None, *, terminated: bool, signum: Any, expired: bool) -> None:
    """Celery's ``task_revoked`` for a run's message (``ref``: the run it names): record why
    the run did not run (:func:`django_cluster_cron.ledger.transitions.discarded`)."""
    if ref is None:
        return
    try:
        status = with_fresh_connection(
            lambda: transitions.discarded(
                ref.run_id,
                ref.task_id,
                ref.attempt,
                terminated=terminated,
                expired=expired,
                signum=signum,
            ),
            QUICK_BUDGET,  # Celery's main process: every other message waits meanwhile
        )
    except Exception as exc:  # the message is gone either way; the outbox may send it again
        logger.error("run.revoke_not_recorded run=%s error=%s", ref.run_id, exc)
        return
    if status is not None:
        logger.warning("run.revoked run=%s task_id=%s status=%s", ref.run_id, ref.task_id, status)
        metrics.get().run_outcome(OUTCOMES[RunStatus(status)]).inc()


def on_unknown(ref: RunRef | None, name: str) -> None:
    """Celery's ``task_unknown`` for a run's message: the worker does not have the job's task
    and Celery dropped the message. The run failed (and says where)."""
    if ref is None:
        return
    error = f"task {name!r} is not registered on worker {worker_name()}"
    try:
        failed = with_fresh_connection(
            lambda: transitions.unrunnable(ref.run_id, ref.task_id, ref.attempt, error),
            QUICK_BUDGET,
        )
    except Exception as exc:  # the outbox sends a queued run again
        logger.error("run.unknown_not_recorded run=%s error=%s", ref.run_id, exc)
        return
    if failed:
        logger.error("run.failed run=%s task_id=%s error=%s", ref.run_id, ref.task_id, error)
        metrics.get().run_outcome("failed").inc()


def revoked_ref(task_name: object, request: Any) -> RunRef | None:
    """The run a revoked message names: by its arguments in the form before 0.2, else by its
    headers (Celery's request of the message)."""
    task_id = getattr(request, "id", None)
    if task_name == EXECUTE_TASK:
        return execute_ref(getattr(request, "args", None), task_id)
    return headers_ref(request, task_id)
