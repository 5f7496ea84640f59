"""The django.tasks adapter of the dispatch port: runs enqueued on their task's own backend.

A job whose task is a ``django.tasks`` task (the import path of a function decorated with
``@task``, Django 6's or the ``django-tasks`` backport's) has each run enqueued as this app's
wrapper task, ``django_cluster_cron.djtasks.run_scheduled_job``, on the backend of the job's task,
in the job's queue (else the task's) with the job's priority (else the task's). The wrapper's
keyword arguments name the run (``run``, ``attempt``, ``task_id``) and, for the backend's own
tools, the job, its task and the slot; the job's arguments stay in the ledger (the worker reads
them from the job's row, as for every run), so secrets the admin masks are not copied to the
backend's result store. On the worker the wrapper claims the run before it calls the job's task
(:mod:`django_cluster_cron.djtasks`).

The run's row is committed before its task is enqueued and marked ``queued`` after, as with
Celery: a task is never enqueued for a run that does not exist, and one whose enqueue is
uncertain is sent again by the leader's outbox, its extra copy dropped by the worker's claim.

Deferral: on a backend that supports ``run_after`` (django-tasks-db, django-tasks-rq), runs
recorded ahead of their instant are enqueued when they are recorded, with ``run_after`` at their
due time, so at the instant there is nothing left to send (the run keeps the backend's result
id: a leader that takes it over before then does not enqueue it again); a retry's next attempt
goes with ``run_after`` at its retry time; every other run with ``run_after`` at its due time,
passed, so that a backlog drains in the order the runs fell due. A backend without it gets runs
at their instant, and a retry is left ``retrying`` for the leader's outbox to send once it is
due.

A task that cannot be enqueued at all (its path no longer names a ``django.tasks`` task, or its
backend refuses it: an unknown queue, a priority it does not support) is returned refused, with
the reason (the send flow fails its run), instead of holding up the others; an error of the
backend itself (its database or Redis unreachable) is a failed publish, tried again by the
outbox. Like every adapter, this one writes nothing in the ledger: runs enqueued ahead are
returned with the prepared groups, and the send flow records them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.module_loading import import_string

from ..djtasks_app import Refused, Target, target
from ..ledger.outbox import OutboxMessage
from ..wire.djtasks import WRAPPERS, wrapper_kwargs
from .port import Done, Preparation, PublishFailed, Refusal, publish_runs

__all__ = ["TasksDispatcher", "TasksGroup", "Unsendable"]

logger = logging.getLogger("django_cluster_cron.scheduler")


class Unsendable(Exception):
    """This run's task cannot be enqueued, whatever the backend's health (see the module)."""


@dataclass
class TasksGroup:
    """Runs due at one instant (:class:`~django_cluster_cron.dispatch.port.Prepared`); with
    ``enqueued`` they are on their backend already, deferred to ``due``."""

    due: datetime
    messages: list[OutboxMessage]
    enqueued: bool = False
    _run_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._run_ids = [m.run_id for m in self.messages]
        self._job_ids = [m.job_id for m in self.messages]
        self._slots = [m.scheduled_for for m in self.messages]
        self._task_ids = [m.task_id for m in self.messages]

    def __len__(self) -> int:
        return len(self._run_ids)

    @property
    def run_ids(self) -> Sequence[int]:
        return self._run_ids

    @property
    def job_ids(self) -> Sequence[int]:
        return self._job_ids

    def slot(self, index: int) -> datetime:
        return self._slots[index]

    def task_id(self, index: int) -> str:
        return self._task_ids[index]

    def unpack(self) -> None:
        return None

    def drop_payloads(self) -> None:
        self.messages = []


class TasksDispatcher:
    """Runs of ``django.tasks`` tasks, enqueued on their task's backend (see the module)."""

    def reach(self) -> None:
        """Nothing to reach beforehand: a backend says it is down when it enqueues."""

    def _target(self, message: OutboxMessage) -> Target:
        """The job's task with its backend; :class:`Unsendable` if there is none."""
        try:
            found = target(message.task)
        except Refused as exc:
            raise Unsendable(f"task {message.task!r}: {exc}") from exc
        if found is None:
            raise Unsendable(f"{message.task!r} does not name a django.tasks task")
        return found

    def _enqueue(self, message: OutboxMessage, found: Target, run_after: datetime | None) -> str:
        """Enqueue the wrapper for ``message`` on ``found``'s backend; the backend's result
        id."""
        wrapper = import_string(WRAPPERS[found.framework.package])
        try:
            bound = found.bind(
                wrapper,
                queue=message.queue or found.task.queue_name,
                priority=message.priority,
                run_after=run_after,
            )
        except Refused as exc:
            raise Unsendable(f"task {message.task!r}: {exc}") from exc
        return str(bound.enqueue(**wrapper_kwargs(message)).id)

    @staticmethod
    def _refusal(message: OutboxMessage, exc: Unsendable) -> Refusal:
        return Refusal(message.run_id, message.task_id, message.attempt, str(exc))

    @staticmethod
    def _defers(found: Target) -> bool:
        return bool(getattr(found.backend, "supports_defer", False))

    def publish(self, messages: Sequence[OutboxMessage]) -> Done[str]:
        """Enqueue in order; return the task ids of the runs enqueued. A retry due later on a
        backend that cannot defer is not enqueued now (the outbox sends it once due); a run
        whose task cannot be enqueued is refused. Raises :class:`PublishFailed` when a backend
        does."""
        published: Done[str] = Done()
        now = timezone.now()
        for message in messages:
            try:
                later = message.eta is not None and message.eta > now
                found = self._target(message)
                defers = self._defers(found)
                if later and not defers:
                    continue
                # On a backend that can defer, every run goes with run_after: its retry time,
                # else its due time (passed). Such a backend takes ready tasks by run_after, and
                # one without it (django-tasks-db: "never set" sorts last) would be overtaken by
                # every run recorded ahead, which the outbox reads as a lost message.
                if not message.enqueued:  # not on the backend already, enqueued ahead
                    run_after = message.eta if later else (message.due if defers else None)
                    self._enqueue(message, found, run_after)
            except Unsendable as exc:
                published.refused.append(self._refusal(message, exc))
                continue
            except Exception as exc:  # the backend's own failure: its database, Redis, ...
                raise PublishFailed(published, exc) from exc
            published.append(message.task_id)
        return published

    def prepare(self, messages: Sequence[OutboxMessage]) -> Preparation:
        """Runs recorded ahead, grouped by due time. Those whose backend supports ``run_after``
        are enqueued now, deferred to their due time (returned as enqueued ahead); the others
        wait for their instant. A backend that fails here leaves the rest of the group for the
        instant."""
        by_due: dict[tuple[datetime, bool], list[OutboxMessage]] = {}
        enqueued: list[tuple[int, str]] = []
        for message in messages:
            found = None
            if not message.enqueued:
                with contextlib.suppress(Unsendable):  # failed at its instant, with the reason
                    found = self._target(message)
            deferred = bool(message.enqueued) or (found is not None and self._defers(found))
            if found is not None and deferred and not message.enqueued:
                try:
                    enqueued.append((message.run_id, self._enqueue(message, found, message.due)))
                except Exception as exc:
                    logger.warning("run.defer_failed run=%s error=%s", message.run_id, exc)
                    deferred = False
            by_due.setdefault((message.due, deferred), []).append(message)
        groups = [
            TasksGroup(due=due, messages=grouped, enqueued=deferred)
            for (due, deferred), grouped in by_due.items()
        ]
        return Preparation(sorted(groups, key=lambda group: group.due), enqueued)

    def send_prepared(self, groups: Sequence[Any], keep: set[int]) -> Done[int]:
        """At their instant: the kept runs of deferred groups are on their backend already;
        the others are enqueued now. Returns the runs sent; ``SendFailed`` when a backend
        fails."""
        sent: Done[int] = Done()
        for group in groups:
            assert isinstance(group, TasksGroup)  # this adapter's own, from prepare()
            if group.enqueued:
                sent += [run_id for run_id in group.run_ids if run_id in keep]
                continue
            sent = publish_runs(self.publish, [m for m in group.messages if m.run_id in keep], sent)
        return sent
