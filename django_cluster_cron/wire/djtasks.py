"""A run's ``django.tasks`` message: the wrapper task a backend runs, and its keyword arguments.

Every run of a job whose task is a ``django.tasks`` task is enqueued as :data:`WRAPPERS`' task of
that task's framework, with keyword arguments naming the run (``run``, ``attempt``,
``task_id``) and, for the backend's own tools, the job, its task and the slot; ``expires`` when
the job has one, ``trace`` when tracing is on, ``piece`` for a piece of the run (its index; the
task id and attempt are then the piece's). The job's arguments are not copied: the worker
reads them from the job's row.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..ledger.outbox import OutboxMessage
from . import RunRef, run_ref

__all__ = ["WRAPPERS", "expires_of", "kwargs_ref", "wrapper_kwargs"]

# The wrapper task each framework's backends run (one module holds both): where a backend finds
# it by its function's path.
WRAPPERS = {
    "django.tasks": "django_cluster_cron.djtasks.run_scheduled_job",
    "django_tasks": "django_cluster_cron.djtasks.run_scheduled_job_backport",
}


def wrapper_kwargs(message: OutboxMessage) -> dict[str, Any]:
    """The wrapper task's keyword arguments for ``message``."""
    kwargs: dict[str, Any] = {
        "run": message.run_id,
        "attempt": message.attempt,
        "task_id": message.task_id,
        "job": message.job_name,
        "task": message.task,
        "slot": message.scheduled_for.isoformat(),
    }
    if message.expires is not None:
        kwargs["expires"] = message.expires.isoformat()
    if message.trace:
        kwargs["trace"] = message.trace
    if message.piece is not None:
        kwargs["piece"] = message.piece
    return kwargs


def kwargs_ref(named: Mapping[str, Any]) -> RunRef | None:
    """The run the wrapper's keyword arguments name, or None when they name none."""
    return run_ref(named.get("run"), named.get("attempt"), named.get("task_id"))


def expires_of(named: Mapping[str, Any]) -> datetime | None:
    """When the message expires (aware), if it says so readably."""
    expires = named.get("expires")
    if not isinstance(expires, str):
        return None
    try:
        found = datetime.fromisoformat(expires)
    except ValueError:
        return None
    return found if found.tzinfo is not None else None
