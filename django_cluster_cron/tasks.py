"""What a Celery worker needs of this app: the run guarantees around every task, and the hooks.

A scheduled run arrives as its job's own task; at ``worker_init`` every task class the worker
has gets the wrapper that claims the run before the body (:mod:`django_cluster_cron.worker.
celery`). ``django_cluster_cron.execute_run(run_id, attempt)`` stays for messages in the form
workers before 0.2 ran (queued before an upgrade, or sent while older workers were up); the
leader sends that form until every worker registers ``django_cluster_cron.runs_job_tasks``,
which says "this worker claims runs sent as the job's own task".
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import (
    task_revoked,
    task_unknown,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
)

from .dbconn import forget_inherited
from .ledger.statements import use_own_connection
from .wire import run_ref
from .wire.celery import headers_ref, named_in_headers
from .worker.celery import (
    execute,
    install,
    on_revoked,
    on_unknown,
    remember_pool,
    revoked_ref,
    run_delivered,
)


# acks_late + reject_on_worker_lost: a message whose worker process died before it could claim the
# run goes back to the queue instead of being lost; if the run was already claimed, the
# redelivered copy loses the claim and is dropped. A run whose worker died mid-body is handled by
# the leader's lost-run sweep (heartbeats), per the job's ``on_worker_lost`` policy.
@shared_task(
    name="django_cluster_cron.execute_run",
    bind=True,
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
)
def execute_run(self: Any, run_id: Any = None, attempt: Any = 1, *extra: Any, **named: Any) -> Any:
    sent_for = None if self.request.called_directly else named_in_headers(self.request)
    if sent_for is not None and sent_for != (run_id, attempt):
        # Sent as a job's own task: a job whose task is this one (its row edited past the
        # validation that refuses it). The run is claimed and fails as an invalid job.
        return run_delivered(self, lambda: None)
    # Forged or corrupted messages (wrong arity, strings, None) are rejected inside, with a log
    # line, instead of failing in Celery's argument binding.
    given = attempt if not (extra or named) else None
    execute(self, run_ref(run_id, given, self.request.id), [run_id, given])
    return None


@shared_task(name="django_cluster_cron.runs_job_tasks")
def runs_job_tasks() -> str:
    """Registered only to be seen: a worker that has it claims runs sent as the job's own
    task (the leader's ``MESSAGE_FORM = "auto"`` asks). Calling it does nothing."""
    return "this worker claims runs sent as the job's own task"


@worker_init.connect
def _wrap_tasks(sender: Any = None, **info: Any) -> None:
    """Before the consumer and the pool build their tracers: the claim around every task. And
    the claim and the record on a connection of their own, which Celery's Django fixup does not
    close around every task (it would cost each run a new connection). Not with green threads
    (gevent, eventlet): each would keep a connection of its own."""
    use_own_connection(not _green_pool(sender))
    remember_pool(sender)
    app = getattr(sender, "app", None)
    if app is not None:
        install(app, getattr(sender, "hostname", None))


@worker_process_init.connect
def _wrap_tasks_in_process(sender: Any = None, **info: Any) -> None:
    """A pool process: tasks registered since ``worker_init`` get the wrapper too; connections
    the parent made are not this process's."""
    forget_inherited()
    use_own_connection()  # only prefork pools start processes (a spawned one inherits nothing)
    install(execute_run.app, sender if isinstance(sender, str) else None)


def _green_pool(worker: Any) -> bool:
    pool = getattr(worker, "pool_cls", None)
    name = pool if isinstance(pool, str) else f"{getattr(pool, '__module__', '')}"
    return any(green in str(name).lower() for green in ("gevent", "eventlet"))


@task_revoked.connect
def _record_revoked(sender: Any = None, request: Any = None, **info: Any) -> None:
    """A revoked or expired message of a run: say so in the run's row (see on_revoked)."""
    if request is None:
        return
    on_revoked(
        revoked_ref(getattr(sender, "name", None), request),
        terminated=bool(info.get("terminated")),
        signum=info.get("signum"),
        expired=bool(info.get("expired")),
    )


@task_unknown.connect
def _record_unknown(sender: Any = None, message: Any = None, name: Any = None, **info: Any) -> None:
    """A run sent as a task this worker does not have: Celery drops the message; say so in the
    run's row instead of leaving it queued."""
    headers = getattr(message, "headers", None) or {}
    on_unknown(headers_ref(headers, str(info.get("id") or "")), str(name))


@worker_init.connect
def _serve_worker_metrics(sender: Any = None, **info: Any) -> None:
    """``WORKER_METRICS_PORT``: serve /metrics from the worker's main process, before the pool
    starts, adding up every pool process's values (prometheus_client's multiprocess mode)."""
    from .conf import app_settings
    from .ops import metrics

    port = app_settings.WORKER_METRICS_PORT
    if port is None or not metrics.enabled():  # neither imports prometheus_client
        return
    metrics.prepare_worker_directory()  # before the client is imported: see ops.metrics
    metrics.serve(port, app_settings.WORKER_METRICS_HOST)


@worker_ready.connect
def _say_where_metrics_listen(sender: Any = None, **info: Any) -> None:
    """Celery sets up logging after ``worker_init``: say again where /metrics listens."""
    from .ops import metrics

    metrics.log_listening()


@worker_process_shutdown.connect
def _forget_pool_process(sender: Any = None, pid: Any = None, **info: Any) -> None:
    """A pool process that exits no longer counts for the live gauges."""
    from .ops import metrics

    if isinstance(pid, int):
        metrics.mark_process_dead(pid)
