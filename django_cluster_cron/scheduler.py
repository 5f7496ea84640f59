"""The scheduler loop: standby until the lease is won, then dispatch due slots until it is lost.

One :class:`Scheduler` runs in each ``manage.py run_scheduler`` process. A standby only tries to
take the Redis lease. The leader, each step: renews the lease when due (a failed or lost renewal
means "stop acting as leader now" — back to standby, never a crash); plans and records due slots
in fenced batches and publishes them; re-publishes runs recorded but never published; then sleeps
until the earliest of the next due slot, the next renewal, the next outbox sweep or a change
signal. Outages of Redis, the database or the broker are logged once per state change and
retried with backoff; nothing is dispatched without a current lease and a current epoch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from django.db import DatabaseError, connections
from django.utils import timezone

from .conf import NODE_ID_ENV, app_settings
from .dispatch import PublishFailed
from .lease import LeaderLease, LeaseUnavailable
from .store import FencedOut, OutboxMessage, RunStore

logger = logging.getLogger("django_cluster_cron.scheduler")

BACKOFF_START = 0.5
BACKOFF_MAX = 10.0


def default_node_id() -> str:
    """``$CLUSTER_CRON_NODE_ID`` (e.g. a pod name) or ``hostname:pid``."""
    return os.environ.get(NODE_ID_ENV) or f"{socket.gethostname()}:{os.getpid()}"


class Dispatcher(Protocol):
    def publish(self, messages: list[OutboxMessage]) -> list[str]: ...


class Sleeper(Protocol):
    def wait(self, timeout: float, stop: threading.Event) -> bool: ...

    def close(self) -> None: ...


class Health:
    """Logs one line when a dependency goes down or comes back, and paces retries."""

    def __init__(self) -> None:
        self._down: dict[str, float] = {}

    def down(self, component: str, error: BaseException) -> float:
        """Record a failure; return how long to back off."""
        backoff = self._down.get(component)
        if backoff is None:
            logger.error("%s.down error=%s", component, _one_line(error))
            backoff = BACKOFF_START
        else:
            backoff = min(backoff * 2, BACKOFF_MAX)
        self._down[component] = backoff
        return backoff

    def up(self, component: str) -> None:
        if self._down.pop(component, None) is not None:
            logger.warning("%s.up", component)

    def is_down(self, component: str) -> bool:
        return component in self._down


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300]


class Scheduler:
    def __init__(
        self,
        *,
        node_id: str,
        lease: LeaderLease,
        store: RunStore,
        dispatcher: Dispatcher,
        sleeper: Sleeper,
        clock: Callable[[], datetime] = timezone.now,
        renew_interval: float | None = None,
        poll_interval: float | None = None,
        batch_size: int | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.node_id = node_id
        self.lease = lease
        self.store = store
        self.dispatcher = dispatcher
        self.sleeper = sleeper
        self.clock = clock
        self.renew_interval = renew_interval or min(app_settings.RENEW_INTERVAL, lease.ttl / 3)
        self.poll_interval = poll_interval or app_settings.POLL_INTERVAL
        self.batch_size = batch_size or app_settings.BATCH_SIZE
        self.republish_after = app_settings.OUTBOX_REPUBLISH_AFTER
        self.lost_after = app_settings.RUN_LOST_AFTER
        self.sweep_interval = min(self.republish_after, self.lost_after).total_seconds() / 2
        self.stop = stop or threading.Event()
        self.health = Health()
        self.epoch: int | None = None
        self._renew_at = 0.0
        self._lease_valid_until = 0.0
        self._sweep_at = 0.0
        self._reported_invalid: set[int] = set()
        self._reported_at = 0.0
        self.last_tick: datetime | None = None
        self.last_lag: float | None = None

    @property
    def is_leader(self) -> bool:
        return self.epoch is not None

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        logger.info("scheduler.started node=%s ttl=%.1fs", self.node_id, self.lease.ttl)
        try:
            while not self.stop.is_set():
                delay = self.step()
                if delay > 0 and not self.stop.is_set():
                    self.sleeper.wait(delay, self.stop)
        finally:
            self.shutdown()

    def run_once(self) -> bool:
        """One tick for cron-style use: lead if possible, dispatch what is due, step down.

        Returns whether this node led (False: another node holds the lease).
        """
        try:
            self.step()
            return self.is_leader
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        if self.is_leader:
            self._release("shutdown")
        self.sleeper.close()
        logger.info("scheduler.stopped node=%s", self.node_id)

    def step(self) -> float:
        """One pass (and a status report for the cluster page); returns how long to sleep."""
        delay = self._step()
        self._report()
        return delay

    def _report(self) -> None:
        """Publish this node's state for the admin's cluster page (at most once a second)."""
        if time.monotonic() - self._reported_at < 1.0:
            return
        self._reported_at = time.monotonic()
        from .status import report_node

        report_node(
            self.lease.client,
            node_id=self.node_id,
            epoch=self.epoch,
            last_tick=self.last_tick,
            lag=self.last_lag,
            ttl=max(30.0, self.poll_interval * 3, self.lease.ttl * 3),
        )

    def _step(self) -> float:
        """One pass; returns how long to sleep before the next.

        The database connection is kept across passes (a scheduler is one long-lived process, and
        CONN_MAX_AGE=0 would otherwise mean a reconnect per tick); it is dropped and reopened only
        after a database error.
        """
        if not self.is_leader:
            delay = self._try_lead()
            if not self.is_leader:
                return delay
        if time.monotonic() >= self._renew_at and not self._renew():
            return 0.0
        try:
            # The idle path is this one indexed query, whatever the number of jobs.
            self.last_tick = self.clock()
            next_due = self.store.next_due_at()
            if next_due is not None and next_due <= self.clock():
                self._dispatch_due()
                next_due = self.store.next_due_at()
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

    # -- leadership ------------------------------------------------------------------------

    def _try_lead(self) -> float:
        # The lease's TTL runs from when Redis set it, which is after this instant: dating its
        # validity from here errs on the safe side (a slow reply shortens it, never extends it).
        started = time.monotonic()
        try:
            acquired = self.lease.try_acquire()
        except LeaseUnavailable as exc:
            return self.health.down("redis", exc)
        self.health.up("redis")
        if not acquired:
            return self.poll_interval
        try:
            self.epoch = self.store.claim_leadership(self.node_id, self.lease.token, self.clock())
        except DatabaseError as exc:
            _reset_connections()
            self._quiet_release()
            return self.health.down("db", exc)
        self.health.up("db")
        self._lease_valid_until = started + self.lease.ttl
        self._renew_at = started + self.renew_interval
        self._sweep_at = 0.0
        logger.info("lease.acquired node=%s epoch=%s", self.node_id, self.epoch)
        return 0.0

    def _renew(self) -> bool:
        started = time.monotonic()
        try:
            renewed = self.lease.renew()
        except LeaseUnavailable as exc:
            # We cannot prove we still hold the lease: stop acting as leader now.
            self.health.down("redis", exc)
            self._step_down("redis unreachable")
            return False
        self.health.up("redis")
        if not renewed:
            self._step_down("lease taken or expired")
            return False
        self._lease_valid_until = started + self.lease.ttl
        self._renew_at = started + self.renew_interval
        return True

    def _step_down(self, reason: str) -> None:
        logger.warning("lease.lost node=%s epoch=%s reason=%s", self.node_id, self.epoch, reason)
        self.epoch = None

    def _release(self, reason: str) -> None:
        epoch, self.epoch = self.epoch, None
        released = self._quiet_release()
        if released:
            from .changes import publish_change

            publish_change("lease:released")
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

    def _dispatch_due(self) -> None:
        while self.is_leader and not self.stop.is_set():
            if not self._lease_is_fresh() and not self._renew():
                return
            assert self.epoch is not None
            now = self.clock()
            batch = self.store.schedule_due(
                now=now, epoch=self.epoch, node_id=self.node_id, limit=self.batch_size
            )
            self._report_invalid(batch.invalid)
            _fault_point("after_record")
            if batch.missed or batch.skipped:
                logger.info("runs.recorded missed=%s skipped=%s", batch.missed, batch.skipped)
            self._publish(batch.messages)
            if batch.jobs < self.batch_size:
                return

    def _recover_lost(self) -> None:
        assert self.epoch is not None
        lost = self.store.recover_lost(
            now=self.clock(), lost_after=self.lost_after, epoch=self.epoch, limit=self.batch_size
        )
        if not lost:
            return
        from . import signals

        for item in lost:
            logger.warning(
                "run.lost run=%s job=%s retried=%s reason=%s",
                item.run.pk,
                item.run.job_id,
                item.retried,
                item.reason,
            )
            signals.send(signals.run_lost, item.run, retried=item.retried, reason=item.reason)
            if not item.retried:
                signals.send(signals.run_failed, item.run, error=None)
        self._publish([OutboxMessage.for_run(item.run) for item in lost if item.retried])

    def _republish_stale(self) -> None:
        stale = self.store.stale_pending(
            now=self.clock(), older_than=self.republish_after, limit=self.batch_size
        )
        if stale:
            logger.warning("runs.republish count=%s", len(stale))
            self._publish(stale)

    def _publish(self, messages: list[OutboxMessage]) -> None:
        if not messages or self.epoch is None:
            return
        try:
            published = self.dispatcher.publish(messages)
        except PublishFailed as exc:  # the rest stay pending: the outbox sends them later
            self.health.down("broker", exc.cause)
            published = exc.published
        else:
            self.health.up("broker")
        sent_ids = set(published)  # membership tests below: a batch is hundreds of messages
        on_time = [m for m in messages if m.task_id in sent_ids and m.trigger == "schedule"]
        if on_time:
            now = self.clock()
            self.last_lag = max((now - m.scheduled_for).total_seconds() for m in on_time)
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
        _fault_point("after_publish")
        sent = [m for m in messages if m.task_id in sent_ids]
        self.store.mark_published(sent, epoch=self.epoch, now=self.clock())

    def _report_invalid(self, invalid: list[tuple[int, str]]) -> None:
        for job_id, error in invalid:
            if job_id not in self._reported_invalid:
                self._reported_invalid.add(job_id)
                logger.error("job.invalid job=%s parked until fixed: %s", job_id, error)

    def _sleep_for(self, next_due: datetime | None) -> float:
        now_mono = time.monotonic()
        delay = min(self._renew_at - now_mono, self._sweep_at - now_mono)
        if next_due is not None:
            delay = min(delay, (next_due - self.clock()).total_seconds())
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
    """A scheduler wired to the project's Redis, database and Celery app."""
    from .changes import ChangeListener
    from .dispatch import CeleryDispatcher

    node = node_id or default_node_id()
    lease = LeaderLease.from_settings(node, ttl=ttl)
    return Scheduler(
        node_id=node,
        lease=lease,
        store=overrides.pop("store", None) or RunStore(),
        dispatcher=overrides.pop("dispatcher", None) or CeleryDispatcher(),
        sleeper=overrides.pop("sleeper", None) or ChangeListener(),
        poll_interval=poll_interval,
        stop=stop,
        **overrides,
    )
