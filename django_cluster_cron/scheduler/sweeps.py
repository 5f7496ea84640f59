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
* **Buffers** (every heartbeat interval) — a job's oldest held-back run (``buffered``) is sent
  once nothing of the job runs ahead of it; held-back runs past the catch-up window are
  ``missed``, those of a paused job ``skipped``; the depths go to the buffer gauge.
* **Pieces** — a run split into pieces: a piece whose worker stopped heartbeating is retried or
  failed like a run; a piece sent and not taken by its ``republish_at`` is sent again; and each
  run not closed is settled (the next pieces within its parallel cap, or closed when all have
  ended, its completion message sent once), should the worker of its last piece have died first.
* **Pruning** (at most every ``PRUNE_INTERVAL``, on a thread of its own) — finished runs past
  their retention go, each day summed up first (:mod:`.pruning`).
* **Cancels past their grace** (every heartbeat interval) — a run asked to stop that still runs
  ``cancel_grace`` after the request, on a pool that can terminate it, becomes ``terminating``
  and its worker is asked to stop it with SIGTERM (Celery's ``revoke(terminate=True)``); one
  still terminating a grace (at least ``KILL_WAIT``) later gets SIGKILL. Its worker records it
  ``cancelled``; if the worker itself died, the lost-run sweep does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from .. import signals
from ..conf import app_settings
from ..dispatch import send_pieces, settle_pieces, terminate
from ..ledger import buffer, failures, outbox, piece_moves, pieces, transitions
from ..ledger.outbox import OutboxMessage
from ..ledger.pieces import piece_message
from ..models import JobRun, PieceStatus, RunStatus
from ..ops import metrics
from .leadership import Term
from .pruning import Pruner
from .publishing import Publisher

logger = logging.getLogger("django_cluster_cron.scheduler")

# What the metrics call the end of a piece whose worker was lost, when it does not go again.
LOST_ENDS = {PieceStatus.FAILED: "failed", PieceStatus.CANCELLED: "cancelled"}
# A run still terminating this long after its SIGTERM is due (at the least) gets SIGKILL: its
# job's cancel grace again, never less than this.
KILL_WAIT = timedelta(seconds=5)


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
        self.cancels_due_at = 0.0
        self.killed: set[int] = set()  # runs this node sent SIGKILL for (once each)
        self.pruner = Pruner(term=term, clock=clock)

    def sweep_if_due(self) -> None:
        if time.monotonic() >= self.due_at:
            self.recover_lost()
            self.republish_stale()
            self.pieces()
            self.due_at = time.monotonic() + self.interval
        if time.monotonic() >= self.cancels_due_at:
            self.stop_overdue()
            self.release_buffers()
            self.cancels_due_at = time.monotonic() + app_settings.RUN_HEARTBEAT_INTERVAL
        self.pruner.start_if_due()

    def release_buffers(self) -> None:
        """Send the next run a job holds back once nothing of it runs ahead (a worker that
        ended the run ahead releases it first; this catches the rest: a run lost, revoked,
        cancelled before it started), age out and drop what must go, and export the depths."""
        found = metrics.get()
        jobs = buffer.buffering_jobs()
        if jobs:
            released = buffer.release(jobs, now=self.clock())
            for name, count in released.aged.items():
                found.not_run(name, "catchup_window", count)
            for name, count in released.dropped.items():
                found.not_run(name, "paused", count)
            for run in released.runs:
                logger.info("run.released run=%s job=%s", run.pk, run.job_id)
            self.publisher.publish([OutboxMessage.for_run(run) for run in released.runs])
        if found is not metrics.NULL:
            found.buffer_depths(buffer.depths())

    def stop_overdue(self) -> None:
        """Terminate the runs whose cancel outlasted its grace; kill those that outlast it
        again (see the module)."""
        fence = self.term.fence
        assert fence is not None
        now = self.clock()
        for run in transitions.terminating(now=now, fence=fence, limit=self.batch_size):
            self._signal(run, "SIGTERM")
        for run in transitions.still_terminating(now=now, after=KILL_WAIT, skip=self.killed):
            self.killed.add(run.pk)
            self._signal(run, "SIGKILL")

    def _signal(self, run: JobRun, signal: str) -> None:
        logger.warning(
            "run.terminating run=%s job=%s task_id=%s signal=%s worker=%s",
            run.pk,
            run.job_id,
            run.task_id,
            signal,
            run.worker,
        )
        try:
            terminate(run.task_id, signal)
        except Exception as exc:  # the broker is away: the next sweep sends it again
            logger.error("run.terminate_failed run=%s signal=%s error=%s", run.pk, signal, exc)
            if signal == "SIGKILL":
                self.killed.discard(run.pk)

    def recover_lost(self) -> None:
        fence = self.term.fence
        assert fence is not None
        lost = transitions.lost(
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
            if item.run.status == RunStatus.CANCELLED:  # asked to stop: never a failure
                metrics.get().not_run(item.run.job.name, "cancelled")
                continue
            if not item.retried:
                signals.send(signals.run_failed, item.run, error=None)
                failures.note_failure(item.run.job)
        self.publisher.publish([OutboxMessage.for_run(item.run) for item in lost if item.retried])

    def pieces(self) -> None:
        """Runs split into pieces: silent pieces retried or failed, pieces whose message may be
        lost sent again, and every run not closed settled (the backstop of the workers' own
        settle: the next pieces released, a run whose pieces all ended closed)."""
        fence = self.term.fence
        assert fence is not None
        now, dispatcher = self.clock(), self.publisher.dispatcher
        lost = piece_moves.lost_pieces(
            now=now, lost_after=self.lost_after, fence=fence, limit=self.batch_size
        )
        found = metrics.get()
        for piece in lost:
            logger.warning(
                "piece.lost run=%s piece=%s status=%s", piece.run_id, piece.index, piece.status
            )
            name = piece.run.job.name
            found.piece_outcome(name, "lost")
            if piece.status != PieceStatus.RETRYING:  # its end: failed, or cancelled
                found.piece_outcome(name, LOST_ENDS[piece.status])
        retried = [p for p in lost if p.status == PieceStatus.RETRYING]
        resend = pieces.stale(now=now, fence=fence, limit=self.batch_size)
        if resend:
            logger.warning("pieces.republish count=%s", len(resend))
        send_pieces(dispatcher, [piece_message(p.run, p) for p in retried] + resend)
        for run_id in piece_moves.open_runs():
            settled = settle_pieces(dispatcher, run_id)
            if settled.run is not None:
                found.piece_outcome(settled.run.job.name, "cancelled", settled.cancelled)
        if found is not metrics.NULL:  # one grouped query, only when it is exported
            found.pieces_flying(pieces.in_flight_by_job())

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
