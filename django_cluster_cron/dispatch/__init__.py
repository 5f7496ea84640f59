"""Dispatch: how recorded runs reach an execution system.

:mod:`.port` is the interface the rest of the app uses (publish, prepare, send prepared);
:mod:`.send` the one flow every run goes out through (publish now, send prepared) and the only
part of dispatch that writes the ledger; each execution system is an adapter behind the port —
:mod:`.celery` (every run sent as its job's own Celery task to the job's queue) and
:mod:`.djtasks` (runs of ``django.tasks`` tasks, enqueued on their task's backend).
:func:`default_dispatcher` routes each run to the adapter its job's task belongs to
(:mod:`.route`); the worker side sends a run's next attempt the way it came
(:func:`celery_dispatcher`, :func:`tasks_dispatcher`).
"""

from __future__ import annotations

from typing import Any

from .port import Dispatcher, Done, Preparation, Prepared, PublishFailed, Refusal, SendFailed
from .send import (
    Sent,
    mark_prepared_sent,
    prepare,
    publish_now,
    send_pieces,
    send_prepared,
    settle_pieces,
)

__all__ = [
    "Dispatcher",
    "Done",
    "Preparation",
    "Prepared",
    "PublishFailed",
    "Refusal",
    "SendFailed",
    "Sent",
    "bound_publish_waits",
    "celery_dispatcher",
    "default_dispatcher",
    "mark_prepared_sent",
    "prepare",
    "publish_now",
    "send_pieces",
    "send_prepared",
    "settle_pieces",
    "tasks_dispatcher",
    "terminate",
]


def default_dispatcher() -> Dispatcher:
    """The project's dispatcher: runs of ``django.tasks`` tasks through their backend, the
    others through the project's Celery app (created only when a Celery task is sent)."""
    from .celery import CeleryDispatcher
    from .route import RoutingDispatcher

    return RoutingDispatcher(CeleryDispatcher)


def celery_dispatcher(app: Any = None, *, own_task: bool | None = None) -> Dispatcher:
    """The Celery adapter alone, on ``app`` (the project's if None); ``own_task``: the message
    form (see :class:`.celery.CeleryDispatcher`)."""
    from .celery import CeleryDispatcher

    return CeleryDispatcher(app, own_task=own_task)


def tasks_dispatcher() -> Dispatcher:
    """The ``django.tasks`` adapter alone."""
    from .djtasks import TasksDispatcher

    return TasksDispatcher()


def bound_publish_waits() -> dict[str, object]:
    """Bound how long this process's publishing connection waits on a broker link gone silent
    (``run_scheduler`` calls it before it publishes); returns the transport options added."""
    from ..celery_app import get_celery_app
    from .celery.timeouts import bound_broker_waits

    return bound_broker_waits(get_celery_app())


def terminate(task_id: str, signal: str) -> None:
    """Have the Celery worker running ``task_id`` stop it now with ``signal`` (only Celery's
    prefork, eventlet and gevent pools can; the ledger says which pool runs a run)."""
    from .celery import CeleryDispatcher

    CeleryDispatcher().terminate(task_id, signal)
