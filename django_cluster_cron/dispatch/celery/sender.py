"""One Celery message, as ``app.send_task`` would send it, with its per-batch work done once.

The message is the one ``send_task`` would send: it is built with
``app.amqp.create_task_message`` and sent with ``app.amqp.send_task_message`` (which sends
Celery's ``before_task_publish``/``after_task_publish`` signals, so tracing and error
reporting hooks see every message). What ``send_task`` re-derives for each message but which is
the same for a whole batch (the task's options, the route of a queue, configuration lookups,
declaring the queue) is worked out once per batch: in a burst of thousands of runs that
per-message work cost as much as the broker round trip itself. Messages that ``send_task``
treats specially (an ETA, a call from inside a worker task, task protocol 1) go through
``send_task`` unchanged.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Any

from celery import Celery
from celery.utils.saferepr import saferepr

from ...celery_app import registered_task_names
from ...conf import app_settings
from ...ledger.outbox import OutboxMessage
from ...redaction import redact
from ...wire.celery import EXECUTE_TASK, headers_for

logger = logging.getLogger("django_cluster_cron.scheduler")

# Fail fast when the broker is down: the run stays ``pending`` and the outbox re-publishes it, so
# a long in-process retry would only delay the rest of the tick.
PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
# Options send_task takes as explicit arguments rather than routing options.
_EXPLICIT = ("time_limit", "soft_time_limit", "expires")


# Set once the fast path was found unusable, so that is logged once per process, not per batch.
_slow_path_reported: list[str] = []


class BatchSender:
    """What ``app.send_task`` does for one message, with its per-batch parts done once.

    ``own_task``: each run is sent as its job's own task with the job's arguments (what every
    Celery tool then shows); otherwise as ``execute_run(run_id, attempt)``, the form workers
    older than 0.2 understand (see :mod:`.forms`).
    """

    def __init__(self, app: Celery, producer: Any, *, own_task: bool = True) -> None:
        self.app = app
        self.producer = producer
        self.own_task = own_task
        self.tasks: dict[str, tuple[Any, dict[str, Any]]] = {}
        try:
            self._prepare(app)
        except Exception as exc:  # any drift in Celery internals
            # The fast path leans on Celery internals that send_task itself uses; should a Celery
            # release move them, every message goes through send_task (slower, still correct).
            self.fast = False
            if not _slow_path_reported:
                _slow_path_reported.append(repr(exc))
                logger.warning("dispatch.slow_path reason=%r", exc)
        self.routes: dict[tuple[str, str | None, int | None], dict[str, Any]] = {}
        self.declared: set[str] = set()

    def _prepare(self, app: Celery) -> None:
        amqp = app.amqp
        self.router: Any = amqp.router  # celery-types lacks Router.routes
        self.create_message = amqp.create_task_message
        self.send_message = amqp.send_task_message
        conf = app.conf
        # Inside a worker task send_task links the message to the parent task (root/parent id,
        # inherited priority); protocol 1 builds another message: leave both to send_task.
        self.fast = conf.task_protocol == 2 and app.current_worker_task is None
        self.reply_to = app.thread_oid
        self.sent_event = conf.task_send_sent_event
        self.repr_limits = (amqp.argsrepr_maxsize, conf.task_repr_maxlevels)
        self.kwargsrepr_maxsize = amqp.kwargsrepr_maxsize
        self.no_kwargs = saferepr({}, amqp.kwargsrepr_maxsize, maxlevels=conf.task_repr_maxlevels)
        # What Celery's tools show of the arguments (Flower, events, the worker's log) is masked
        # as the admin masks it; the message's own arguments are the task's, unmasked.
        self.markers = app_settings.REDACT_KEYS
        self.backend = app.backend

    def _task(self, name: str) -> tuple[Any, dict[str, Any]]:
        """The registered task of that name (None if this process does not know it) and its
        own options (queue, time limits...), as send_task would look them up."""
        found = self.tasks.get(name)
        if found is None:
            # send_task looks the task up in the registry without finalizing the app; so do we.
            task_type = self.app._tasks.get(name)  # type: ignore[attr-defined]
            if task_type is None and name != EXECUTE_TASK:
                # A leader need not have imported the project's task modules; a worker has.
                # Import them as a worker would (once per app), so that the task's own queue
                # and time limits are known here too.
                registered_task_names(self.app)
                task_type = self.app._tasks.get(name)  # type: ignore[attr-defined]
            get_options = getattr(task_type, "_get_exec_options", None)
            options = get_options() if callable(get_options) else None
            found = (task_type, {k: v for k, v in (options or {}).items() if v is not None})
            self.tasks[name] = found
        return found

    def form(self, message: OutboxMessage) -> tuple[str, list[Any], dict[str, Any]]:
        """The task name, args and kwargs the message of this run carries (a piece's always
        its own task's: workers before 0.2, which need the old form, know no pieces)."""
        if (self.own_task or message.piece is not None) and message.task:
            return message.task, list(message.args), dict(message.kwargs)
        return EXECUTE_TASK, [message.run_id, message.attempt], {}

    def send(self, message: OutboxMessage) -> None:
        name, args, kwargs = self.form(message)
        if not self.fast or message.eta is not None:
            self.app.send_task(
                name,
                args=args,
                kwargs=kwargs,
                task_id=message.task_id,
                producer=self.producer,
                retry=True,
                retry_policy=PUBLISH_RETRY_POLICY,
                headers=headers_for(message),
                **routing_for(message),
            )
            return
        task_type, task_options = self._task(name)
        # The job's own settings win over the task's (as options given to apply_async do).
        options = {**task_options, **routing_for(message)}
        time_limit, soft_time_limit, expires = (options.pop(key, None) for key in _EXPLICIT)
        options = self._route(name, task_type, options, args, kwargs)
        if expires is not None:
            # As send_task: a relative TTL for the broker, never negative.
            options["expiration"] = max(0.0, (expires - self.app.now()).total_seconds())
        task_id = message.task_id
        built = self.create_message(
            task_id,
            name,
            args,
            kwargs,
            expires=expires,
            reply_to=self.reply_to,
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
            create_sent_event=self.sent_event,
            ignore_result=None,
            argsrepr=self._repr(args),
            kwargsrepr=self._repr(kwargs) if kwargs else self.no_kwargs,
            **options,
        )
        queue = options.get("queue")
        queue_name = getattr(queue, "name", None)
        if queue_name is not None:
            # Declaring is only needed once per connection; kombu would check its cache of
            # declared entities on every message.
            options["declare"] = [] if queue_name in self.declared else [queue]
            self.declared.add(queue_name)
        producer = self.producer
        reraise = getattr(producer.connection, "_reraise_as_library_errors", nullcontext)
        with reraise():
            self.backend.on_task_call(producer, task_id)
            self.send_message(
                producer,
                name,
                built,
                retry=True,
                retry_policy=PUBLISH_RETRY_POLICY,
                headers=headers_for(message),
                **options,
            )

    def _route(
        self,
        name: str,
        task_type: Any,
        options: dict[str, Any],
        args: list[Any],
        kwargs: dict[str, Any],
    ) -> dict[str, Any]:
        # The route depends only on the task, queue and priority unless user routers (which may
        # look at the message) or other options are involved: then ask the router each time.
        if self.router.routes or not set(options) <= {"queue", "priority"}:
            routed: dict[str, Any] = self.router.route(options, name, args, kwargs, task_type)
            return routed
        key = (name, options.get("queue"), options.get("priority"))
        if key not in self.routes:
            self.routes[key] = self.router.route(options, name, args, kwargs, task_type)
        return dict(self.routes[key])

    def _repr(self, value: list[Any] | dict[str, Any]) -> str:
        if type(value) is list and all(type(arg) is int for arg in value):
            return repr(value)  # what saferepr gives for a short list of ints, much cheaper
        value = redact(value, self.markers)
        maxsize, maxlevels = self.repr_limits
        if isinstance(value, dict):
            maxsize = self.kwargsrepr_maxsize
        return str(saferepr(value, maxsize, maxlevels=maxlevels))


def routing_for(message: OutboxMessage) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if message.queue:
        options["queue"] = message.queue
    if message.priority is not None:
        options["priority"] = message.priority
    if message.expires is not None:
        options["expires"] = message.expires
    if message.soft_time_limit:
        options["soft_time_limit"] = message.soft_time_limit
    if message.time_limit:
        options["time_limit"] = message.time_limit
    if message.eta is not None:
        options["eta"] = message.eta
    return options
