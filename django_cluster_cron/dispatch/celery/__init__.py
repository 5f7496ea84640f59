"""The Celery adapter of the dispatch port: runs published as Celery messages.

Each run is sent as its job's own Celery task, with the job's arguments, the run's deterministic
task id, the job's queue/priority/expiry/time limits over the task's own, and headers naming the
run (run, job, slot, attempt, epoch, trigger), so a copy published twice (outbox re-publish, a
stale leader) is recognisable and the worker's claim drops it. While workers of an earlier
release may be running, runs go as ``django_cluster_cron.execute_run(run_id, attempt)`` instead
(:mod:`.forms`). A batch reuses one producer (one broker connection) for all its messages.

How one message is built and sent is :mod:`.sender`; runs recorded ahead are prepared by
:mod:`.prepared`.

On kombu's Redis transport the messages of a batch are pipelined (``Producer.batch()``, kombu
>= 5.7): one round trip per :data:`PIPELINE_SIZE` messages instead of one each. A chunk counts
as published only once its pipeline has been executed; if that fails, delivery of the chunk is
uncertain, so its runs stay ``pending`` and the outbox sends them again (a copy that did arrive
is dropped by the worker's claim). Celery's ``after_task_publish`` fires when a message is handed
to the pipeline, a few milliseconds before the pipeline reaches Redis.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, cast

from celery import Celery

from ...ledger import outbox
from ...ledger.outbox import OutboxMessage
from ...wire.celery import EXECUTE_TASK
from ..port import Done, Preparation, Prepared, PublishFailed, publish_runs
from . import forms, prepared
from .prepared import PreparedGroup
from .sender import BatchSender

__all__ = ["EXECUTE_TASK", "CeleryDispatcher", "PreparedGroup"]

logger = logging.getLogger("django_cluster_cron.scheduler")

# Messages per publish pipeline: one broker round trip each, and the unit that counts as
# published (or not) when the broker fails mid-batch.
PIPELINE_SIZE = 500


class CeleryDispatcher:
    def __init__(
        self, app: Celery | None = None, *, pipeline: bool = True, own_task: bool | None = None
    ) -> None:
        """``own_task``: send runs as their job's own task (True) or as ``execute_run``
        (False); None follows the ``MESSAGE_FORM`` setting."""
        if app is None:
            from ...celery_app import get_celery_app

            app = get_celery_app()
        self.app = app
        self.pipeline = pipeline
        self._own_task = own_task

    def reach(self) -> None:
        """Connect to the broker once; raises what the connection raises. A scheduler that saw
        the broker fail checks this before it takes the lease again."""
        with self.app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=0)

    def own_task(self) -> bool:
        if self._own_task is not None:
            return self._own_task
        return forms.own_task_form(self.app)

    def _pipeline(self, producer: Any, size: int) -> AbstractContextManager[Any] | None:
        """kombu's publish batch (one Redis round trip per chunk), or None without one.

        kombu >= 5.7 offers ``Producer.batch()`` (transports that cannot batch, like AMQP,
        publish at once inside it); older kombu has none and each message is sent alone.
        """
        batch = getattr(producer, "batch", None) if self.pipeline else None
        if batch is None:
            return None
        return cast(AbstractContextManager[Any], batch(max_size=size))

    def prepare(self, messages: Sequence[OutboxMessage]) -> Preparation:
        """Build the messages of runs recorded ahead, to send at their instant (see
        :mod:`.prepared`); nothing reaches the broker."""
        groups = prepared.prepare(self.app, messages, fast=self.pipeline, own_task=self.own_task())
        return Preparation(groups)

    def send_prepared(self, groups: Sequence[Prepared], keep: set[int]) -> Done[int]:
        """Send the prepared messages whose run is in ``keep``; return the runs sent.

        Raises :class:`~django_cluster_cron.dispatch.port.SendFailed` (with the runs sent before
        the failure) when the broker fails.
        """
        ours = cast("Sequence[PreparedGroup]", groups)  # this adapter's own, from prepare()
        form = self.own_task()
        built = [g for g in ours if g.messages is None]
        # Built in the other message form (the workers' answers changed it since): sent again
        # from their rows, in the form of now.
        stale = {r for g in built if g.own_task != form for r in g.run_ids if r in keep}
        sent = Done(prepared.push(self.app, [g for g in built if g.own_task == form], keep))
        ordinary = [m for g in ours if g.messages for m in g.messages if m.run_id in keep]
        if stale:
            ordinary += outbox.messages_of(sorted(stale))
        if ordinary:
            sent = publish_runs(self.publish, ordinary, sent)
        return sent

    def terminate(self, task_id: str, signal: str) -> None:
        """Have the worker running ``task_id`` stop it now: Celery's ``revoke`` with
        ``terminate=True`` and ``signal`` (the pool process, or green thread, running it is
        ended; a worker where it no longer runs ignores it). Raises what the broker raises."""
        self.app.control.revoke(task_id, terminate=True, signal=signal)

    def publish(self, messages: Sequence[OutboxMessage]) -> Done[str]:
        """Publish in order; return the task ids that reached the broker.

        Stops at the first failure with :class:`PublishFailed`: the caller marks what was
        published and leaves the rest ``pending`` for the outbox.
        """
        published: Done[str] = Done()
        if not messages:
            return published
        try:
            with self.app.producer_or_acquire() as producer:
                sender = BatchSender(self.app, producer, own_task=self.own_task())
                for start in range(0, len(messages), PIPELINE_SIZE):
                    chunk = messages[start : start + PIPELINE_SIZE]
                    pipeline = self._pipeline(producer, len(chunk))
                    if pipeline is None:
                        for message in chunk:
                            sender.send(message)
                            published.append(message.task_id)
                        continue
                    with pipeline:
                        for message in chunk:
                            sender.send(message)
                    # Only an executed pipeline counts: if it fails, its whole chunk stays
                    # pending (delivery uncertain) and the outbox sends it again.
                    published.extend(message.task_id for message in chunk)
        except Exception as exc:  # kombu, amqp, redis and socket errors alike
            raise PublishFailed(published, exc) from exc
        return published
