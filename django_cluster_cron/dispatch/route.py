"""Which adapter sends a run: the job's task decides.

A job's task that names a ``django.tasks`` task goes through :mod:`.djtasks`; any other name is a
Celery task's and goes through :mod:`.celery`. The router looks at each task name once per
process (a deploy that changes what a name is restarts the schedulers) and creates the Celery
adapter only when a Celery task is sent, so a project without Celery never reaches for a broker.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ..djtasks_app import resolve_task
from ..ledger.outbox import OutboxMessage
from .djtasks import TasksDispatcher, TasksGroup
from .port import Dispatcher, Done, PartlyDone, Preparation, Prepared, PublishFailed, SendFailed

CELERY = "celery"
DJANGO_TASKS = "django.tasks"

T = TypeVar("T")


def _every(calls: Iterable[Callable[[], Done[T]]], failed: type[PartlyDone[T]]) -> Done[T]:
    """Each adapter's call, in turn, whether or not one before it failed: one execution system
    failing does not hold up the other's runs. What got through (and what was refused);
    ``failed`` (with that, and the first failure's cause) when any call failed."""
    done: Done[T] = Done()
    failure: BaseException | None = None
    for call in calls:
        try:
            done.extend_with(call())
        except failed as exc:
            done.extend_with(exc.done)
            failure = failure or exc.cause
    if failure is not None:
        raise failed(done, failure)
    return done


class RoutingDispatcher:
    """The dispatch port over both adapters (see the module)."""

    def __init__(
        self,
        celery: Callable[[], Dispatcher],
        tasks: TasksDispatcher | None = None,
    ) -> None:
        self._make_celery = celery
        self._celery: Dispatcher | None = None
        self.tasks = tasks or TasksDispatcher()
        self._kinds: dict[str, str] = {}

    @property
    def celery(self) -> Dispatcher:
        if self._celery is None:
            self._celery = self._make_celery()
        return self._celery

    def kind(self, task: str) -> str:
        found = self._kinds.get(task)
        if found is None:
            found = DJANGO_TASKS if resolve_task(task) is not None else CELERY
            self._kinds[task] = found
        return found

    def _adapter(self, kind: str) -> Any:
        return self.tasks if kind == DJANGO_TASKS else self.celery

    def _split(self, messages: Sequence[OutboxMessage]) -> dict[str, list[OutboxMessage]]:
        parts: dict[str, list[OutboxMessage]] = {}
        for message in messages:
            parts.setdefault(self.kind(message.task), []).append(message)
        return parts

    def reach(self) -> None:
        """Reach the broker, if Celery has been used (its failure is what this is asked after)."""
        if self._celery is not None:
            reach = getattr(self._celery, "reach", None)
            if reach is not None:
                reach()

    def publish(self, messages: Sequence[OutboxMessage]) -> Done[str]:
        """Each adapter's messages in their order. One execution system failing does not hold up
        the other's runs: it publishes its messages too, then :class:`PublishFailed` says what
        got through (the failed system's runs stay pending for the outbox)."""
        parts = self._split(messages).items()
        calls = [functools.partial(self._adapter(kind).publish, part) for kind, part in parts]
        return _every(calls, PublishFailed)

    def prepare(self, messages: Sequence[OutboxMessage]) -> Preparation:
        groups: list[Prepared] = []
        enqueued: list[tuple[int, str]] = []
        for kind, part in self._split(messages).items():
            prepared = self._adapter(kind).prepare(part)
            groups += prepared
            enqueued += prepared.enqueued_ahead
        due: Callable[[Prepared], datetime] = lambda group: group.due  # noqa: E731
        return Preparation(sorted(groups, key=due), enqueued)

    def send_prepared(self, groups: Sequence[Prepared], keep: set[int]) -> Done[int]:
        """Each adapter's prepared groups; as :meth:`publish`, a failing system does not hold
        up the other's runs (:class:`SendFailed` says which runs went out)."""
        ours = [g for g in groups if isinstance(g, TasksGroup)]
        theirs = [g for g in groups if not isinstance(g, TasksGroup)]
        calls = []
        if theirs:
            calls.append(functools.partial(self.celery.send_prepared, theirs, keep))
        if ours:
            calls.append(functools.partial(self.tasks.send_prepared, ours, keep))
        return _every(calls, SendFailed)
