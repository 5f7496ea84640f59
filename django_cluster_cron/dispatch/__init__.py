"""Dispatch: how recorded runs reach an execution system.

:mod:`.port` is the interface the rest of the app uses (publish, prepare, send prepared);
:mod:`.send` the one publish-then-mark flow; each execution system is an adapter behind the
port — :mod:`.celery` (every run sent as its job's own Celery task to the job's queue) and
:mod:`.djtasks` (runs of ``django.tasks`` tasks, enqueued on their task's backend).
:func:`default_dispatcher` routes each run to the adapter its job's task belongs to
(:mod:`.route`).
"""

from __future__ import annotations

from .port import Dispatcher, Prepared, PublishFailed, SendFailed
from .send import Sent, publish, send_runs

__all__ = [
    "Dispatcher",
    "Prepared",
    "PublishFailed",
    "SendFailed",
    "Sent",
    "bound_publish_waits",
    "default_dispatcher",
    "publish",
    "send_runs",
]


def default_dispatcher() -> Dispatcher:
    """The project's dispatcher: runs of ``django.tasks`` tasks through their backend, the
    others through the project's Celery app (created only when a Celery task is sent)."""
    from .celery import CeleryDispatcher
    from .route import RoutingDispatcher

    return RoutingDispatcher(CeleryDispatcher)


def bound_publish_waits() -> dict[str, object]:
    """Bound how long this process's publishing connection waits on a broker link gone silent
    (``run_scheduler`` calls it before it publishes); returns the transport options added."""
    from ..celery_app import get_celery_app
    from .celery.timeouts import bound_broker_waits

    return bound_broker_waits(get_celery_app())
