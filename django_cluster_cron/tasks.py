"""The Celery task every scheduled run is sent as: ``django_cluster_cron.execute_run``.

Why one generic task of the app rather than a base class for the user's tasks: the claim that
makes a duplicate delivery harmless, the heartbeat, the overlap lock and the run ledger must wrap
the job's code for *every* registered task, including tasks from third-party apps the project
cannot change. The generic task is routed to the job's queue and calls the job's own task
in-process, with the job's arguments, once it owns the run. The logic lives in
:mod:`django_cluster_cron.worker.execute`; this module only registers the task.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import task_revoked, worker_init, worker_process_shutdown, worker_ready

from .worker.execute import execute
from .worker.record import on_revoked


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
def execute_run(self: Any, run_id: Any = None, attempt: Any = 1, *extra: Any, **named: Any) -> None:
    # Forged or corrupted messages (wrong arity, strings, None) are rejected inside, with a log
    # line, instead of failing in Celery's argument binding.
    execute(self, run_id, attempt if not (extra or named) else None)


@task_revoked.connect
def _record_revoked(sender: Any = None, request: Any = None, **info: Any) -> None:
    """A revoked or expired ``execute_run`` message: say so in the run's row (see on_revoked)."""
    if getattr(sender, "name", None) == execute_run.name and request is not None:
        on_revoked(
            request,
            terminated=bool(info.get("terminated")),
            signum=info.get("signum"),
            expired=bool(info.get("expired")),
        )


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
