"""The wrapper task a ``django.tasks`` backend's worker runs for a scheduled run.

Every run of a job whose task is a ``django.tasks`` task is enqueued on that task's backend as
``run_scheduled_job`` (``run_scheduled_job_backport`` for tasks of the ``django-tasks``
backport), with keyword arguments naming the run (:mod:`django_cluster_cron.wire.djtasks`). The
tasks are defined here, where backends find them by their path; what they do with a run is
:mod:`django_cluster_cron.worker.djtasks`.

A backend's own tools (django-tasks-db's admin, ``get_result``) therefore show this wrapper's path
for every scheduled run, and its keyword arguments say whose run it is: ``job``, ``task``,
``slot``, ``run`` and ``attempt``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .djtasks_app import Framework, frameworks
from .worker.djtasks import NOT_RUN, deliver_here, run

__all__ = ["NOT_RUN", "deliver_here", "run_scheduled_job", "run_scheduled_job_backport"]

logger = logging.getLogger("django_cluster_cron.worker")


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
