"""The leader's sweeps of the ledger, every half of the shorter of their two waits.

* **Lost runs** — a run whose worker stopped heartbeating for ``RUN_LOST_AFTER`` is retried as
  its next attempt or failed, per the job's ``on_worker_lost``; retried ones are sent at once.
* **The outbox** — a run whose message may not be in the broker is sent again: recorded and
  never sent ``OUTBOX_REPUBLISH_AFTER`` after it was due (a crash or a broker outage between
  commit and publish), or waiting past its ``republish_at`` with a sign that its message is
  lost: its queue stalled (no worker took a run from it for ``OUTBOX_REPUBLISH_AFTER``), or a
  run sent after it was taken first. A run waiting its turn in a backlog that workers are
  draining is not sent again, however long the backlog. A run never sent that is past its
  time goes by its job's catch-up policy (missed, or sent as a catch-up run), as any late slot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from .. import signals
from ..conf import app_settings
from ..ledger import failures, outbox
from ..ledger.outbox import OutboxMessage
from ..ledger.transitions import recover_lost
from ..ops import metrics
from .leadership import Term
from .publishing import Publisher

logger = logging.getLogger("django_cluster_cron.scheduler")


class Sweeps:
    def __init__(
        self,
        *,
        term: Term,
        clock: Callable[[], datetime],
        publisher: Publisher,
        batch_size: int,
    ) -> None:
        self.term = term
        self.clock = clock
        self.publisher = publisher
        self.batch_size = batch_size
        self.republish_after = app_settings.OUTBOX_REPUBLISH_AFTER
        self.lost_after = app_settings.RUN_LOST_AFTER
        self.interval = min(self.republish_after, self.lost_after).total_seconds() / 2
        # When (monotonic) the next sweep is due; a new term sweeps at once.
        self.due_at = 0.0

    def sweep_if_due(self) -> None:
        if time.monotonic() >= self.due_at:
            self.recover_lost()
            self.republish_stale()
            self.due_at = time.monotonic() + self.interval

    def recover_lost(self) -> None:
        fence = self.term.fence
        assert fence is not None
        lost = recover_lost(
            now=self.clock(), lost_after=self.lost_after, fence=fence, limit=self.batch_size
        )
        if not lost:
            return
        for item in lost:
            logger.warning(
                "run.lost run=%s job=%s retried=%s reason=%s",
                item.run.pk,
                item.run.job_id,
                item.retried,
                item.reason,
            )
            signals.send(signals.run_lost, item.run, retried=item.retried, reason=item.reason)
            metrics.get().runs_lost.labels(retried=str(item.retried).lower()).inc()
            if not item.retried:
                signals.send(signals.run_failed, item.run, error=None)
                failures.note_failure(item.run.job)
        self.publisher.publish([OutboxMessage.for_run(item.run) for item in lost if item.retried])

    def republish_stale(self) -> None:
        now = self.clock()
        progress = None
        if outbox.overdue_exists(now):  # what workers took lately tells lost from waiting
            progress = outbox.queue_progress(now=now, window=self.republish_after)
        stale = outbox.stale_pending(
            now=now, older_than=self.republish_after, limit=self.batch_size, progress=progress
        )
        if stale:
            logger.warning("runs.republish count=%s", len(stale))
            metrics.get().republished.inc(len(stale))
            self.publisher.publish_found(stale)
        found = metrics.get()
        if found is not metrics.NULL:  # one indexed query per sweep, only when it is exported
            oldest = outbox.oldest_pending_slot(self.clock())
            age = 0.0 if oldest is None else (self.clock() - oldest).total_seconds()
            found.oldest_pending.set(max(age, 0.0))
