"""The scheduler loop: standby until the lease is won, then dispatch due slots until it is lost.

One :class:`Scheduler` runs in each ``manage.py run_scheduler`` process. A standby only tries to
take the lease (Redis or the database, see :mod:`django_cluster_cron.leases`). The leader, each
step: renews the lease when due (a failed or lost renewal means "stop acting as leader now" —
back to standby, never a crash); plans and records due slots in fenced batches and publishes
them; re-publishes runs recorded but never published; then sleeps until the earliest of the next
due slot, the next renewal, the next outbox sweep or a change signal. Outages of the lease's
backend, the database or the broker are logged once per state change and retried with backoff;
nothing is dispatched without a current lease and a current epoch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.db import DatabaseError, connections
from django.utils import timezone

from ..conf import NODE_ID_ENV, app_settings
from ..core.clock import OffsetClock, SkewChange, format_offset
from ..dispatch import Dispatcher, default_dispatcher, publish
from ..leases import LEADER, Lease, LeaseBackend, LeaseUnavailable, get_backend
from ..ledger import outbox
from ..ledger.fence import Fence, FencedOut
from ..ledger.outbox import OutboxMessage
from ..ledger.transitions import recover_lost
from ..ops import metrics
from .armed import SEND_EARLY, Armed, SendsArmed
from .recording import Recorder

logger = logging.getLogger("django_cluster_cron.scheduler")

BACKOFF_START = 0.5
BACKOFF_MAX = 10.0
# A first guess of how long recording one batch takes, until one has been measured.
BATCH_SECONDS_GUESS = 0.05
# A standby reads the database's clock this often (a leader does in every idle tick), so that it
# knows its offset before it leads and the cluster page shows it.
STANDBY_CLOCK_CHECK = 30.0


def default_node_id() -> str:
    """``$CLUSTER_CRON_NODE_ID`` (e.g. a pod name) or ``hostname:pid``."""
    return os.environ.get(NODE_ID_ENV) or f"{socket.gethostname()}:{os.getpid()}"


class Sleeper(Protocol):
    def wait(self, timeout: float, stop: threading.Event) -> bool: ...

    def close(self) -> None: ...


# What each backend's outage is logged as (``redis.down``, ``db.down``).
DEPENDENCY = {"redis": "redis", "database": "db"}


class Health:
    """Logs one line when a dependency goes down or comes back, and paces retries."""

    def __init__(self) -> None:
        self._down: dict[str, float] = {}
        # When (monotonic) each component that is down went down: the health probe reads it.
        self.down_since: dict[str, float] = {}

    def down(self, component: str, error: BaseException) -> float:
        """Record a failure; return how long to back off."""
        backoff = self._down.get(component)
        if backoff is None:
            logger.error("%s.down error=%s", component, _one_line(error))
            self.down_since[component] = time.monotonic()
            backoff = BACKOFF_START
        else:
            backoff = min(backoff * 2, BACKOFF_MAX)
        self._down[component] = backoff
        return backoff

    def up(self, component: str) -> None:
        if self._down.pop(component, None) is not None:
            self.down_since.pop(component, None)
            logger.warning("%s.up", component)

    def is_down(self, component: str) -> bool:
        return component in self._down


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300]


class Scheduler(SendsArmed):
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
        lookahead: timedelta | None = None,
    ) -> None:
        self.node_id = node_id
        self.lease = lease
        self.backend = backend or get_backend()
        self.lease_dependency = DEPENDENCY.get(self.backend.name, self.backend.name)
        self.recorder = recorder
        self.dispatcher = dispatcher
        self.sleeper = sleeper
        # "Now" is the database's time (DESIGN G7): the host clock corrected by the offset the
        # idle query measures. Tests pass a plain callable to drive time themselves.
        self.clock: Callable[[], datetime] = clock or OffsetClock(
            host=timezone.now, warn_after=app_settings.CLOCK_SKEW_WARNING
        )
        self.renew_interval = renew_interval or min(app_settings.RENEW_INTERVAL, lease.ttl / 3)
        self.poll_interval = poll_interval or app_settings.POLL_INTERVAL
        self.batch_size = batch_size or app_settings.BATCH_SIZE
        # Record runs this far before they are due, holding at most this many prepared.
        self.lookahead = app_settings.LOOKAHEAD if lookahead is None else lookahead
        self.lookahead_runs = app_settings.LOOKAHEAD_RUNS
        self.armed = Armed()
        self._batch_seconds = BATCH_SECONDS_GUESS
        self.republish_after = app_settings.OUTBOX_REPUBLISH_AFTER
        self.lost_after = app_settings.RUN_LOST_AFTER
        self.sweep_interval = min(self.republish_after, self.lost_after).total_seconds() / 2
        self.stop = stop or threading.Event()
        self.health = Health()
        # The current leadership term (None while standing by).
        self.fence: Fence | None = None
        self._renew_at = 0.0
        self._lease_valid_until = 0.0
        self._sweep_at = 0.0
        self._taking_over = False
        self._unmarked: list[tuple[list[int], datetime]] = []
        self._reported_invalid: set[int] = set()
        self._reported_at = 0.0
        self._clock_checked_at = 0.0
        self.last_tick: datetime | None = None
        self.last_lag: float | None = None
        # When (monotonic) the last pass of the loop ended: liveness for the health probe.
        self.last_pass: float | None = None
        self.after_pass: Callable[[], object] | None = None

    @property
    def is_leader(self) -> bool:
        return self.fence is not None

    @property
    def epoch(self) -> int | None:
        return None if self.fence is None else self.fence.epoch

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
        self.lookahead = timedelta(0)
        try:
            self.step()
            return self.is_leader
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        if self.is_leader:
            with contextlib.suppress(DatabaseError, FencedOut):
                self._mark_sent()
            self._release("shutdown")
        self.sleeper.close()
        logger.info("scheduler.stopped node=%s", self.node_id)

    def step(self) -> float:
        """One pass (and a status report for the cluster page); returns how long to sleep."""
        delay = self._step()
        self._report()
        self.last_pass = time.monotonic()
        metrics.get().ticks.inc()
        if self.after_pass is not None:
            self.after_pass()
        return delay

    def _report(self) -> None:
        """Publish this node's state for the admin's cluster page (every ``report_interval``)."""
        if time.monotonic() - self._reported_at < self.backend.report_interval:
            return
        self._reported_at = time.monotonic()
        from ..ops.status import report_node

        offset = self.clock_offset
        report_node(
            self.backend,
            node_id=self.node_id,
            epoch=self.epoch,
            seen=self.clock(),
            last_tick=self.last_tick,
            lag=self.last_lag,
            clock_offset=None if offset is None else offset.total_seconds(),
            clock_skewed=bool(getattr(self.clock, "skewed", False)),
            ttl=max(30.0, self.poll_interval * 3, self.lease.ttl * 3),
        )

    def _step(self) -> float:
        """One pass; returns how long to sleep before the next.

        The database connection is kept across passes (a scheduler is one long-lived process, and
        CONN_MAX_AGE=0 would otherwise mean a reconnect per tick); it is dropped and reopened only
        after a database error.
        """
        if not self.is_leader:
            self._check_clock_as_standby()
            delay = self._try_lead()
            if not self.is_leader:
                return delay
        if time.monotonic() >= self._renew_at and not self._renew():
            return 0.0
        try:
            if self._taking_over:
                self._take_over()
            self._send_armed()
            # The idle path is this one query, whatever the number of jobs: the epoch, the
            # database's clock and the earliest next run (an indexed MIN).
            sent = self._host_now()
            state = self.recorder.idle_state()
            self._observe_clock(state.db_now if state else None, sent)
            if state is None or (state.epoch, state.token) != (self.epoch, self.lease.token):
                self._report_epoch_change(state)
                raise FencedOut(self.epoch or 0)
            self.last_tick = self.clock()
            next_due = state.next_due
            if next_due is not None and next_due <= self._horizon(self.clock()):
                self._dispatch_due()
                next_due = self.recorder.next_due_at()
            self._mark_sent()
            if time.monotonic() >= self._sweep_at:
                self._recover_lost()
                self._republish_stale()
                self._sweep_at = time.monotonic() + self.sweep_interval
        except FencedOut:
            logger.warning("lease.fenced node=%s epoch=%s", self.node_id, self.epoch)
            self._release("fenced")
            return self.poll_interval
        except DatabaseError as exc:
            _reset_connections()
            return self.health.down("db", exc)
        self.health.up("db")
        return self._sleep_for(next_due)

    # -- the database's clock ----------------------------------------------------------------

    @property
    def clock_offset(self) -> timedelta | None:
        """This host's clock minus the database's, once measured (None before, or for a test
        clock)."""
        if isinstance(self.clock, OffsetClock) and self.clock.measured:
            return self.clock.offset
        return None

    def _host_now(self) -> datetime:
        if isinstance(self.clock, OffsetClock):
            return self.clock.host()
        return self.clock()

    def _observe_clock(self, db_now: datetime | None, sent: datetime) -> None:
        """Learn the offset from a database time read between ``sent`` and now; log a change."""
        if db_now is None or not isinstance(self.clock, OffsetClock):
            return
        change = self.clock.observe(db_now, sent, self._host_now())
        metrics.get().clock_offset.labels(node=self.node_id).set(self.clock.offset.total_seconds())
        self._clock_checked_at = time.monotonic()
        offset = format_offset(self.clock.offset)
        if change is SkewChange.SKEWED:
            logger.warning(
                "clock.skew node=%s offset=%s (this host's clock minus the database's; slots "
                "are decided by the database's clock)",
                self.node_id,
                offset,
            )
        elif change is SkewChange.SYNCED:
            logger.info("clock.synced node=%s offset=%s", self.node_id, offset)

    def _check_clock_as_standby(self) -> None:
        if time.monotonic() - self._clock_checked_at < STANDBY_CLOCK_CHECK:
            return
        if not isinstance(self.clock, OffsetClock):
            return
        from ..dbtime import database_now

        sent = self._host_now()
        try:
            db_now = database_now()
        except DatabaseError as exc:  # the leader's path reports the database; try later
            logger.debug("clock.check_failed node=%s error=%s", self.node_id, exc)
            _reset_connections()
            self._clock_checked_at = time.monotonic()
            return
        self._observe_clock(db_now, sent)

    # -- leadership ------------------------------------------------------------------------

    def _report_epoch_change(self, state: Any) -> None:
        """The leader row no longer names this node's epoch and token: say what happened."""
        if state is not None and self.epoch is not None and state.epoch < self.epoch:
            # Epochs only grow: this row was edited or restored from a backup. The token check
            # keeps any older leader's writes out; this node steps down and takes a new epoch.
            logger.error(
                "lease.epoch_went_back node=%s epoch=%s row_epoch=%s (the leader row was edited "
                "by hand or restored; stepping down)",
                self.node_id,
                self.epoch,
                state.epoch,
            )

    def _try_lead(self) -> float:
        # The lease's TTL runs from when its backend set it, which is after this instant: dating
        # its validity from here errs on the safe side (a slow reply shortens it, never extends).
        started = time.monotonic()
        try:
            acquired = self.lease.try_acquire()
        except LeaseUnavailable as exc:
            return self.health.down(self.lease_dependency, exc)
        self.health.up(self.lease_dependency)
        if not acquired:
            return self.poll_interval
        try:
            if self.backend.fences_in_lease:
                # The acquiring UPDATE bumped the epoch on the lease's own row.
                fence = Fence.join(self.lease.token)
            else:
                fence = Fence.claim(self.node_id, self.lease.token)
        except DatabaseError as exc:
            _reset_connections()
            self._quiet_release()
            return self.health.down("db", exc)
        self.health.up("db")
        if fence is None:  # the row changed hands between the two statements: not ours
            return self.poll_interval
        self.fence = fence
        self._taking_over = True
        self._lease_valid_until = started + self.lease.ttl
        self._renew_at = started + self.renew_interval
        self._sweep_at = 0.0
        logger.info("lease.acquired node=%s epoch=%s", self.node_id, self.epoch)
        self._show_role()
        return 0.0

    def _renew(self) -> bool:
        started = time.monotonic()
        try:
            renewed = self.lease.renew()
        except LeaseUnavailable as exc:
            # We cannot prove we still hold the lease: stop acting as leader now.
            self.health.down(self.lease_dependency, exc)
            metrics.get().lease_renewals.labels(result="failed").inc()
            self._step_down(f"{self.lease_dependency} unreachable")
            return False
        self.health.up(self.lease_dependency)
        if not renewed:
            metrics.get().lease_renewals.labels(result="lost").inc()
            self._step_down("lease taken or expired")
            return False
        metrics.get().lease_renewals.labels(result="ok").inc()
        self._lease_valid_until = started + self.lease.ttl
        self._renew_at = started + self.renew_interval
        return True

    def _step_down(self, reason: str) -> None:
        logger.warning("lease.lost node=%s epoch=%s reason=%s", self.node_id, self.epoch, reason)
        self.fence = None
        self.armed.clear()  # the rows stay: the next leader takes them over
        self._unmarked = []
        self._show_role()

    def _show_role(self) -> None:
        found = metrics.get()
        found.leader.labels(node=self.node_id).set(1 if self.is_leader else 0)
        found.lease_epoch.set(self.epoch or 0)

    def _release(self, reason: str) -> None:
        epoch, self.fence = self.epoch, None
        self.armed.clear()
        self._unmarked = []
        self._show_role()
        released = self._quiet_release()
        if released:
            self.backend.publish_change("lease:released")
        logger.info(
            "lease.released node=%s epoch=%s reason=%s released=%s",
            self.node_id,
            epoch,
            reason,
            released,
        )

    def _quiet_release(self) -> bool:
        try:
            return self.lease.release()
        except LeaseUnavailable:
            return False

    def _lease_is_fresh(self) -> bool:
        # Stop writing well before the TTL runs out if renewals are late (a long batch, a GC
        # pause): the fence would reject stale writes anyway, this keeps them from being tried.
        return time.monotonic() < self._lease_valid_until - self.renew_interval / 2

    # -- work ------------------------------------------------------------------------------

    def _horizon(self, now: datetime) -> datetime:
        """How far ahead this pass records: the look-ahead while its run budget has room and
        no instant already prepared comes due before a batch could be recorded."""
        if self.lookahead <= timedelta(0) or self.armed.count >= self.lookahead_runs:
            return now
        earliest = self.armed.earliest()
        if earliest is not None and (earliest - now).total_seconds() < self._batch_seconds:
            return now
        return now + self.lookahead

    def _dispatch_due(self) -> None:
        """Record and publish what is due, and record ahead up to the horizon, batch by batch;
        an instant prepared earlier that comes due meanwhile is sent between two batches."""
        while self.is_leader and not self.stop.is_set():
            if not self._lease_is_fresh() and not self._renew():
                return
            assert self.fence is not None
            self._send_armed()
            now = self.clock()
            horizon = self._horizon(now)
            limit = self.batch_size
            if horizon > now:
                limit = min(limit, self.lookahead_runs - self.armed.count)
            started = time.monotonic()
            batch = self.recorder.schedule_due(
                now=now, fence=self.fence, node_id=self.node_id, limit=limit, horizon=horizon
            )
            if batch.jobs:
                took = (time.monotonic() - started) * self.batch_size / batch.jobs
                self._batch_seconds = 0.7 * self._batch_seconds + 0.3 * took
            self._report_invalid(batch.invalid)
            _fault_point("after_record")
            if batch.missed or batch.skipped:
                logger.info("runs.recorded missed=%s skipped=%s", batch.missed, batch.skipped)
            self._count_slots(batch)
            self._publish(batch.messages)
            self._arm(batch.ahead)
            if batch.jobs < limit:
                return

    def _count_slots(self, batch: Any) -> None:
        slots = metrics.get().slots
        for trigger in ("schedule", "catchup"):
            recorded = sum(1 for m in batch.messages if m.trigger == trigger)
            if recorded:
                slots.labels(outcome=trigger).inc(recorded)
        if batch.missed:
            slots.labels(outcome="missed").inc(batch.missed)
        if batch.skipped:
            slots.labels(outcome="skipped").inc(batch.skipped)

    def _recover_lost(self) -> None:
        assert self.fence is not None
        lost = recover_lost(
            now=self.clock(), lost_after=self.lost_after, fence=self.fence, limit=self.batch_size
        )
        if not lost:
            return
        from .. import signals
        from ..ledger import failures

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
        self._publish([OutboxMessage.for_run(item.run) for item in lost if item.retried])

    def _republish_stale(self) -> None:
        stale = outbox.stale_pending(
            now=self.clock(), older_than=self.republish_after, limit=self.batch_size
        )
        if stale:
            logger.warning("runs.republish count=%s", len(stale))
            metrics.get().republished.inc(len(stale))
            self._publish(stale)
        found = metrics.get()
        if found is not metrics.NULL:  # one indexed query per sweep, only when it is exported
            oldest = outbox.oldest_pending_slot(self.clock())
            age = 0.0 if oldest is None else (self.clock() - oldest).total_seconds()
            found.oldest_pending.set(max(age, 0.0))

    def _publish(self, messages: list[OutboxMessage]) -> None:
        if not messages or self.fence is None:
            return
        result = publish(self.dispatcher, messages)
        if result.failure is not None:  # the rest stay pending: the outbox sends them later
            self.health.down("broker", result.failure)
            metrics.get().publish_failures.inc(len(messages) - len(result.messages))
        else:
            self.health.up("broker")
        sent_ids = {m.task_id for m in result.messages}
        on_time = [m for m in messages if m.task_id in sent_ids and m.trigger == "schedule"]
        if on_time:
            now = self.clock()
            lags = [(now - m.due).total_seconds() for m in on_time]
            self.last_lag = max(lags)
            metrics.observe_each(metrics.get().publish_latency, lags)
        if logger.isEnabledFor(logging.INFO):  # a burst: thousands of lines nobody may log
            for message in messages:
                if message.task_id in sent_ids:
                    logger.info(
                        "run.dispatched job=%s slot=%s task_id=%s trigger=%s epoch=%s",
                        message.job_id,
                        message.scheduled_for.isoformat(),
                        message.task_id,
                        message.trigger,
                        self.epoch,
                    )
        outbox.mark_published(
            result.messages, now=self.clock(), fence=self.fence, node_id=self.node_id
        )

    def _report_invalid(self, invalid: list[tuple[int, str]]) -> None:
        for job_id, error in invalid:
            if job_id not in self._reported_invalid:
                self._reported_invalid.add(job_id)
                logger.error("job.invalid job=%s parked until fixed: %s", job_id, error)

    def _sleep_for(self, next_due: datetime | None) -> float:
        """Until the next renewal or sweep, the next prepared instant, or the moment the next
        job's due time enters the look-ahead (its due time itself when there is no room to
        record ahead, or an instant prepared earlier has to go first)."""
        now_mono = time.monotonic()
        delay = min(self._renew_at - now_mono, self._sweep_at - now_mono)
        now = self.clock()
        earliest = self.armed.earliest()
        if earliest is not None:
            delay = min(delay, (earliest - now).total_seconds() - SEND_EARLY)
        if next_due is not None:
            wake = next_due - (self._horizon(now) - now)
            if wake <= now:
                # Due within the look-ahead yet not recorded: a job whose overlap policy decides
                # at its instant. Look again before then, for jobs entering the look-ahead.
                wake = min(next_due, now + max(self.lookahead / 4, timedelta(seconds=1)))
            delay = min(delay, (wake - now).total_seconds())
        return max(0.0, delay)


def _reset_connections() -> None:
    for connection in connections.all(initialized_only=True):
        with contextlib.suppress(DatabaseError):
            connection.close()


def _fault_point(name: str) -> None:
    """Test hook: ``CLUSTER_CRON_FAULTS=after_record`` makes the process die right there.

    Used by the outbox tests to crash between recording runs and publishing them; inert unless
    the variable names this point.
    """
    if name in os.environ.get("CLUSTER_CRON_FAULTS", "").split(","):
        logger.error("fault.injected point=%s", name)
        os._exit(70)


def build_scheduler(
    *,
    node_id: str | None = None,
    ttl: float | None = None,
    poll_interval: float | None = None,
    stop: threading.Event | None = None,
    **overrides: Any,
) -> Scheduler:
    """A scheduler wired to the project's lease backend, database and Celery app."""
    node = node_id or default_node_id()
    backend: LeaseBackend = overrides.pop("backend", None) or get_backend()
    lease = backend.lease(LEADER, node, app_settings.LEASE_TTL if ttl is None else ttl)
    sleeper = overrides.pop("sleeper", None) or backend.sleeper(
        poll_interval or app_settings.POLL_INTERVAL
    )
    return Scheduler(
        node_id=node,
        lease=lease,
        recorder=overrides.pop("recorder", None) or Recorder(),
        dispatcher=overrides.pop("dispatcher", None) or default_dispatcher(),
        sleeper=sleeper,
        poll_interval=poll_interval,
        stop=stop,
        backend=backend,
        **overrides,
    )
