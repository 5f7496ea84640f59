"""Recording what is due, batch by batch: the leader's work once the idle query found some.

Each batch records and publishes the runs due now, and records ahead, up to the horizon, the
runs that will be due (sent at their instant by the :class:`~.armed.ArmedSender`). The horizon
is the look-ahead while the budget of runs recorded ahead has room and no instant prepared
earlier comes due before a batch could be recorded; how long a batch takes is measured as the
batches go. A job that cannot be planned is parked: logged once, and returned once its problem
is gone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from ..ledger import buffer
from ..ledger.outbox import OutboxMessage
from ..ops import metrics
from .armed import Armed, ArmedSender
from .leadership import Term
from .publishing import Publisher
from .recording import BatchResult, Recorder

logger = logging.getLogger("django_cluster_cron.scheduler")

# A first guess of how long recording one batch takes, until one has been measured.
BATCH_SECONDS_GUESS = 0.05


class Batches:
    def __init__(
        self,
        *,
        node_id: str,
        term: Term,
        recorder: Recorder,
        publisher: Publisher,
        sender: ArmedSender,
        clock: Callable[[], datetime],
        stop: threading.Event,
        batch_size: int,
        lookahead: timedelta,
        lookahead_runs: int,
    ) -> None:
        self.node_id = node_id
        self.term = term
        self.recorder = recorder
        self.publisher = publisher
        self.sender = sender
        self.clock = clock
        self.stop = stop
        self.batch_size = batch_size
        # Record runs this far before they are due, holding at most this many prepared.
        self.lookahead = lookahead
        self.lookahead_runs = lookahead_runs
        self._batch_seconds = BATCH_SECONDS_GUESS
        self._reported_invalid: set[int] = set()

    @property
    def armed(self) -> Armed:
        return self.sender.armed

    def horizon(self, now: datetime) -> datetime:
        """How far ahead this pass records: the look-ahead while its run budget has room and
        no instant already prepared comes due before a batch could be recorded."""
        if self.lookahead <= timedelta(0) or self.armed.count >= self.lookahead_runs:
            return now
        earliest = self.armed.earliest()
        if earliest is not None and (earliest - now).total_seconds() < self._batch_seconds:
            return now
        return now + self.lookahead

    def record_due(self) -> None:
        """Record and publish what is due, and record ahead up to the horizon, batch by batch;
        an instant prepared earlier that comes due meanwhile is sent between two batches.
        Meanwhile the leader's pruning waits (``Term.quiet``)."""
        self.term.quiet.clear()
        try:
            self._record_due()
        finally:
            self.term.quiet.set()

    def _record_due(self) -> None:
        while self.term.is_leader and not self.stop.is_set():
            if not self.term.fresh_or_renewed():
                return
            fence = self.term.fence
            assert fence is not None
            self.sender.send_due()
            now = self.clock()
            horizon = self.horizon(now)
            limit = self.batch_size
            if horizon > now:
                limit = min(limit, self.lookahead_runs - self.armed.count)
            started = time.monotonic()
            batch = self.recorder.schedule_due(
                now=now, fence=fence, node_id=self.node_id, limit=limit, horizon=horizon
            )
            if batch.jobs:
                took = (time.monotonic() - started) * self.batch_size / batch.jobs
                self._batch_seconds = 0.7 * self._batch_seconds + 0.3 * took
            self._report_invalid(batch.invalid)
            if batch.missed or batch.skipped:
                logger.info("runs.recorded missed=%s skipped=%s", batch.missed, batch.skipped)
            _count_slots(batch)
            self.publisher.publish(batch.messages)
            if batch.preempt:
                self._release_preempted(list(batch.preempt), now)
            self.sender.arm(batch.ahead)
            if batch.jobs < limit:
                return

    def _release_preempted(self, job_ids: list[int], now: datetime) -> None:
        """A newer slot of a cancel_other or terminate_other job waits for the runs ahead: if
        they had not started (cancelled outright), nothing is ahead any more and it goes now,
        not at the next sweep."""
        released = buffer.release(job_ids, now=now)
        self.publisher.publish([OutboxMessage.for_run(run) for run in released.runs])

    def return_parked(self) -> None:
        for job_id in self.recorder.return_parked(self.clock()):
            self._reported_invalid.discard(job_id)
            logger.warning("job.returned job=%s: the problem it was parked for is gone", job_id)

    def _report_invalid(self, invalid: list[tuple[int, str]]) -> None:
        for job_id, error in invalid:
            if job_id not in self._reported_invalid:
                self._reported_invalid.add(job_id)
                logger.error("job.invalid job=%s parked until fixed: %s", job_id, error)


def _count_slots(batch: BatchResult) -> None:
    """Count what the batch decided: runs to send now and runs recorded ahead alike."""
    slots = metrics.get().slots
    decided = [*batch.messages, *batch.ahead]
    for trigger in ("schedule", "catchup"):
        recorded = sum(1 for m in decided if m.trigger == trigger)
        if recorded:
            slots.labels(outcome=trigger).inc(recorded)
    if batch.missed:
        slots.labels(outcome="missed").inc(batch.missed)
    if batch.skipped:
        slots.labels(outcome="skipped").inc(batch.skipped)
    for (job_name, reason), count in batch.not_run.items():
        metrics.get().not_run(job_name, reason, count)
