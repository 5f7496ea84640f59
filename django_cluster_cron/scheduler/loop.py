"""The scheduler loop: standby until the lease is won, then dispatch due slots until it is lost.

One :class:`Scheduler` runs in each ``manage.py run_scheduler`` process, made of parts:

* :class:`~.leadership.Term` — the lease and the fencing epoch: take, renew, step down, release;
* :class:`~.recording.Recorder` — the idle query and the fenced batches that record due runs;
* :class:`~.batches.Batches` — what is due, recorded batch by batch up to the horizon;
* :class:`~.publishing.Publisher` — runs sent now; :class:`~.armed.ArmedSender` — runs recorded
  ahead, sent at their instant;
* :class:`~.sweeps.Sweeps` — lost runs and the outbox;
* :class:`~.clock.ClockWatch` and :class:`~.reporting.Reporter` — the database's clock, and what
  the node tells the cluster page.

:func:`~.parts.build_parts` builds them and gives each its collaborators.

Each pass of the loop, as leader: renew the lease when due (a failed or lost renewal means "stop
acting as leader now" — back to standby, never a crash); take over a predecessor's unpublished
runs once; send the runs recorded ahead that are due; read the idle state (one query); record
and publish what is due and record ahead what will be, batch by batch; sweep when due; then
sleep until the earliest of the next due slot, the next renewal, the next sweep or a change
signal. Outages of the lease's backend, the database or the broker are logged once per state
change and retried with backoff; nothing is dispatched without a current lease and epoch. A
leader whose statements or publishes keep failing for ``RESIGN_AFTER`` gives the lease up
(another node may reach the database or the broker). A node takes the lease only once it reaches
the database again; after the broker failed it, once it reaches the broker or after leaving the
lease to the others for a while, longer each time (see the term). An outage for everyone thus
does not pass the lease around.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import DatabaseError

from ..coordination import Coordination, Sleeper
from ..core.uncertain import WentBack
from ..dbconn import ReadOnlyServer, read_only_error
from ..dispatch import Dispatcher
from ..leases import Lease, LeaseBackend
from ..ledger.fence import FencedOut
from ..ops import metrics
from .armed import SEND_EARLY, Armed
from .health import BACKOFF_MAX
from .parts import build_parts, reset_connections
from .recording import Recorder
from .uncertain import decide_uncertain

logger = logging.getLogger("django_cluster_cron.scheduler")

# A leader whose statements, or publishes, have kept failing this long (seconds: from the first
# failure to the latest) gives the lease up.
RESIGN_AFTER = 1.0
# How long a stopping scheduler waits for its pruning pass under way.
PRUNE_JOIN = 5.0


class Scheduler:
    def __init__(
        self,
        *,
        node_id: str,
        lease: Lease,
        recorder: Recorder,
        dispatcher: Dispatcher,
        sleeper: Sleeper,
        clock: Callable[[], datetime] | None = None,
        renew_interval: float | None = None,
        poll_interval: float | None = None,
        batch_size: int | None = None,
        stop: threading.Event | None = None,
        backend: LeaseBackend | None = None,
        coordination: Coordination | None = None,
        lookahead: timedelta | None = None,
    ) -> None:
        parts = build_parts(
            node_id=node_id,
            lease=lease,
            recorder=recorder,
            dispatcher=dispatcher,
            clock=clock,
            renew_interval=renew_interval,
            poll_interval=poll_interval,
            batch_size=batch_size,
            stop=stop,
            backend=backend,
            coordination=coordination,
            lookahead=lookahead,
            on_term_end=self._term_ended,
            on_went_back=self._went_back,
        )
        self.node_id, self.lease, self.recorder = node_id, lease, recorder
        self.dispatcher, self.sleeper = dispatcher, sleeper
        self.backend, self.coordination = parts.backend, parts.coordination
        self.clock, self.poll_interval, self.stop = parts.clock, parts.poll_interval, parts.stop
        self.health, self.term, self.lateness = parts.health, parts.term, parts.lateness
        self.publisher, self.sender, self.batches = parts.publisher, parts.sender, parts.batches
        self.sweeps, self.clock_watch = parts.sweeps, parts.clock_watch
        self.reporter = parts.reporter
        self._uncertain: WentBack | None = None
        self.last_tick: datetime | None = None
        # When (monotonic) the last pass of the loop ended: liveness for the health probe.
        self.last_pass: float | None = None
        self.after_pass: Callable[[], object] | None = None

    # -- what others read ------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.term.is_leader

    @property
    def epoch(self) -> int | None:
        return self.term.epoch

    @property
    def armed(self) -> Armed:
        return self.sender.armed

    @property
    def renew_interval(self) -> float:
        return self.term.renew_interval

    @property
    def sweep_interval(self) -> float:
        return self.sweeps.interval

    @property
    def longest_sleep(self) -> float:
        """The longest one pass sleeps: until a renewal, a poll, a sweep or an outage's back-off."""
        return max(self.poll_interval, self.renew_interval, self.sweep_interval, BACKOFF_MAX)

    @property
    def last_lag(self) -> float | None:
        return self.lateness.last

    @property
    def clock_offset(self) -> timedelta | None:
        return self.clock_watch.offset

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        logger.info(
            "scheduler.started node=%s ttl=%.1fs lease=%s",
            self.node_id,
            self.lease.ttl,
            self.backend.name,
        )
        try:
            while not self.stop.is_set():
                delay = self.step()
                if delay > 0 and not self.stop.is_set():
                    self.sleeper.wait(delay, self.stop)
        finally:
            self.shutdown()

    def run_once(self) -> bool:
        """One tick for cron-style use: lead if possible, dispatch what is due, step down.

        Returns whether this node led (False: another node holds the lease). Nothing is
        recorded ahead: this process will not be there at the instant.
        """
        self.batches.lookahead = timedelta(0)
        try:
            self.step()
            return self.is_leader
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        if self.is_leader:
            with contextlib.suppress(DatabaseError, FencedOut):
                self.sender.mark_sent()
            self.term.release("shutdown")
        # After the release (a pass under way does not hold the next leader back longer than
        # its own transaction): a pass that has begun ends, committed or fenced out.
        self.sweeps.pruner.join(PRUNE_JOIN)
        self.sleeper.close()
        logger.info("scheduler.stopped node=%s", self.node_id)

    def step(self) -> float:
        """One pass (and a status report for the cluster page); returns how long to sleep."""
        delay = self._step()
        offset = self.clock_watch.offset
        reported = self.reporter.report_if_due(
            epoch=self.epoch,
            seen=self.clock(),
            last_tick=self.last_tick,
            lag=self.last_lag,
            clock_offset=None if offset is None else offset.total_seconds(),
            clock_skewed=self.clock_watch.skewed,
            prunable=self.sweeps.pruner.found if self.is_leader else None,
            ledger=self.sweeps.pruner.ledger if self.is_leader else None,
        )
        if reported is False and self.is_leader:
            # The report goes where the lease lives: prove the lease now rather than at the next
            # renewal, so a leader that lost it steps aside within a pass.
            self.term.renew_at = 0.0
            delay = 0.0
        self.last_pass = time.monotonic()
        metrics.get().ticks.inc()
        if self.after_pass is not None:
            self.after_pass()
        return delay

    def _step(self) -> float:
        """One pass; returns how long to sleep before the next.

        The database connection is kept across passes (a scheduler is one long-lived process, and
        CONN_MAX_AGE=0 would otherwise mean a reconnect per tick); it is dropped and reopened only
        after a database error.
        """
        if not self.is_leader:
            self.clock_watch.check_as_standby(on_database_error=reset_connections)
            delay = self.term.try_lead(self.poll_interval)
            if not self.term.is_leader:
                return delay
            self.sender.taking_over = True
            self.sweeps.due_at = 0.0
        if self.term.renewal_due() and not self.term.renew():
            return 0.0
        try:
            if self._uncertain is not None:
                self._settle_uncertain(self._uncertain)
            if self.sender.taking_over:
                self.sender.take_over()
                self.batches.return_parked()
            self.sender.send_due()
            # The idle path is this one query, whatever the number of jobs: the epoch, the
            # database's clock and the earliest next run (an indexed MIN).
            sent = self.clock_watch.host_now()
            state = self.recorder.idle_state()
            if state is not None and state.read_only:
                raise ReadOnlyServer("the database server answering refuses writes")
            self.clock_watch.observe(state.db_now if state else None, sent)
            if state is None or not self.term.holds(state.epoch, state.token):
                self.term.report_epoch_change(None if state is None else state.epoch)
                raise FencedOut(self.epoch or 0)
            went = self.term.seen_by_leader(state.epoch, state.writes, state.last_write_at)
            if went is not None:  # the database went back under this term
                self._settle_uncertain(went)
            self.last_tick = self.clock()
            next_due = state.next_due
            if next_due is not None and next_due <= self.batches.horizon(self.clock()):
                self.batches.record_due()
                next_due = self.recorder.next_due_at()
            self.sender.mark_sent()
            self.sweeps.sweep_if_due()
        except FencedOut:
            logger.warning("lease.fenced node=%s epoch=%s", self.node_id, self.epoch)
            self.term.release("fenced")
            return self.poll_interval
        except DatabaseError as exc:
            reset_connections()
            # The change channel too: after a failover its connection may still listen to the
            # old server, where no change is ever announced again (it re-subscribes at its next
            # wait, and polls while it cannot).
            self.sleeper.close()
            backoff = self.health.down("db", exc)
            if self.is_leader and read_only_error(exc):
                # A server that answers but refuses writes (a primary demoted by a failover):
                # the connections were closed, the next ones reach whatever the address names
                # now; meanwhile a node whose connections are there already leads.
                self.term.release("database read-only")
            elif self.is_leader and self.health.failing_for("db") >= RESIGN_AFTER:
                # The database is out of this node's reach, maybe not of the others': give the
                # lease up so one of them leads. It leads again only once it reaches the database.
                self.term.release("database unreachable")
            return backoff
        self.health.up("db")
        if self.is_leader and self.health.failing_for("broker") >= RESIGN_AFTER:
            # Its runs stay pending for the next leader, which may reach the broker; this node
            # leaves the lease to such a node for a while (longer each time).
            self.term.release("broker unreachable")
            self.term.hold_off_broker()
            return self.poll_interval
        return self._sleep_for(next_due)

    def _term_ended(self) -> None:
        self.sender.forget()
        self._uncertain = None

    def _went_back(self, went: WentBack) -> None:
        """The term found the database behind what this node saw: decide the uncertain window's
        slots before dispatching anything (at the term's first pass)."""
        self._uncertain = went

    def _settle_uncertain(self, went: WentBack) -> None:
        self._uncertain = None
        if self.term.fence is not None:
            decide_uncertain(
                went,
                fence=self.term.fence,
                now=self.clock(),
                node_id=self.node_id,
                ttl=timedelta(seconds=self.lease.ttl),
                lookahead=self.batches.lookahead,
            )

    # -- pacing ---------------------------------------------------------------------------

    def _sleep_for(self, next_due: datetime | None) -> float:
        """Until the next renewal or sweep, the next prepared instant, or the moment the next
        job's due time enters the look-ahead (its due time itself when there is no room to
        record ahead, or an instant prepared earlier has to go first)."""
        now_mono = time.monotonic()
        delay = min(self.term.renew_at - now_mono, self.sweeps.due_at - now_mono)
        now = self.clock()
        earliest = self.armed.earliest()
        if earliest is not None:
            delay = min(delay, (earliest - now).total_seconds() - SEND_EARLY)
        if next_due is not None:
            wake = next_due - (self.batches.horizon(now) - now)
            if wake <= now:
                # Due within the look-ahead yet not recorded: a job whose overlap policy decides
                # at its instant. Look again before then, for jobs entering the look-ahead.
                wake = min(next_due, now + max(self.batches.lookahead / 4, timedelta(seconds=1)))
            delay = min(delay, (wake - now).total_seconds())
        return max(0.0, delay)
