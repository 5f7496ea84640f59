"""Leadership: this node's term as leader, from taking the lease to losing or giving it up.

::

                try_lead: lease taken, epoch fenced
     standby ──────────────────────────────────────▶ leader ──┐ renew: still ours
        ▲                                              │  ◀────┘ (every renew_interval)
        │   renew failed or lost ─ step down           │
        ├──────────────────────────────────────────────┤
        │   fenced, or shutdown ─ release the lease    │
        └──────────────────────────────────────────────┘

A leader that cannot renew because the lease's backend is out of reach steps down; with the
Redis lease it also gives its term up in the database (:mod:`.handover`), and a standby that
finds it there frees the Redis key (only while that leader's token holds it) and takes it at once
instead of waiting for its TTL. (With the database lease, a standby sees a leader whose connection
ended through the lease's session witness: :mod:`django_cluster_cron.leases.witness`.)

A standby only tries to take the lease, and only while it can reach the database (one that takes
writes: a primary demoted by a failover still answers) and the broker:
a node whose last statement or publish failed first checks that one is back, so it never holds
a lease it could not use while a standby that can use it waits. Taking it is not enough to lead:
the term also needs its fencing epoch in the database
(:class:`~django_cluster_cron.ledger.fence.Fence`; the database lease's acquiring UPDATE bumps
it, after a Redis or in-memory lease the term bumps it itself).
Every write the leader makes is fenced by that epoch, so a term that ended without this node
knowing (a long pause) cannot write anything.

The lease is renewed every ``renew_interval`` (at most a third of its TTL). A renewal that fails
(the backend unreachable) or finds the lease gone ends the term at once: never act as leader on a
lease that cannot be proven. Between renewals the term counts as *fresh* until half a renewal
interval before its TTL would run out, and a leader stops writing when it is not. An ended term
calls ``on_end`` so the leader's other parts drop what only a leader may keep.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from django.db import DatabaseError, connection

from ..core.uncertain import Horizon, WentBack
from ..dbconn import check_writable
from ..leases import Lease, LeaseBackend, LeaseUnavailable
from ..leases.base import node_of
from ..ledger.fence import Fence
from ..ops import metrics
from .handover import Handover
from .health import Health
from .watch import RowWatch

logger = logging.getLogger("django_cluster_cron.scheduler")

# A node that gave the lease up because it could not publish leaves it this many lease TTLs to a
# node that can, before it leads again without the broker; the wait doubles each time up to MAX.
BROKER_PATIENCE = 3
BROKER_PATIENCE_MAX = 30
# What each lease backend's outage is logged as (``redis.down``, ``db.down``).
DEPENDENCY = {"redis": "redis", "database": "db"}


def reach_writable_database() -> None:
    """Raise unless the database answers and takes writes: a node leads only where its writes
    can land (a primary demoted by a failover still answers reads)."""
    check_writable(connection)


class Term:
    """This node's leadership: the lease, the fencing epoch while it leads, the renewals."""

    def __init__(
        self,
        *,
        node_id: str,
        lease: Lease,
        backend: LeaseBackend,
        health: Health,
        renew_interval: float,
        on_end: Callable[[], object],
        on_released: Callable[[], object],
        on_database_error: Callable[[], object],
        reach_database: Callable[[], object] = reach_writable_database,
        reach_broker: Callable[[], object] | None = None,
        on_went_back: Callable[[WentBack], object] | None = None,
    ) -> None:
        self.node_id = node_id
        self.lease = lease
        self.backend = backend
        self.health = health
        self.renew_interval = renew_interval
        self.dependency = DEPENDENCY.get(backend.name, backend.name)
        self._on_end = on_end
        self._on_released = on_released
        self._on_database_error = on_database_error
        self._reach_database = reach_database
        self._reach_broker = reach_broker
        # The leader row watched for a database that went back (a lossy failover).
        self.watch = RowWatch(node_id=node_id, on_went_back=on_went_back)
        # Set while the tick is not recording a slot's runs. The leader's other writers on
        # threads of their own (the pruning) wait for it before each fenced write: a fenced
        # transaction holds the leader row, which every batch of the tick needs.
        self.quiet = threading.Event()
        self.quiet.set()
        # The term given up, or taken, through the database when the lease is out of reach.
        self.handover = Handover(
            node_id=node_id,
            lease=lease,
            backend=backend,
            dependency=self.dependency,
            on_database_error=on_database_error,
            seen=self.watch.seen_in_database,
        )
        if hasattr(lease, "seen"):  # the database lease reads the row as it tries it
            lease.seen = self.horizon.observe
        # After giving the lease up for the broker: how long to leave it to a node that reaches
        # the broker before this one tries again without it (doubles each time, up to a cap).
        self._broker_patience = lease.ttl * BROKER_PATIENCE
        self._broker_wait_until = 0.0
        # The current term's fence (None while standing by).
        self.fence: Fence | None = None
        # When (monotonic) the next renewal is due, and until when the lease is surely ours.
        self.renew_at = 0.0
        self.valid_until = 0.0
        # A node exports its role from its start: 0 until it leads (a standby says so too).
        self._show_role()

    @property
    def is_leader(self) -> bool:
        return self.fence is not None

    @property
    def epoch(self) -> int | None:
        return None if self.fence is None else self.fence.epoch

    @property
    def horizon(self) -> Horizon:
        """The furthest this node saw the leader row go (see :class:`~.watch.RowWatch`)."""
        return self.watch.horizon

    def holds(self, epoch: int, token: str) -> bool:
        """Whether the leader row (its ``epoch`` and ``token``) still names this term."""
        return (epoch, token) == (self.epoch, self.lease.token)

    def try_lead(self, poll_interval: float) -> float:
        """Take the lease and the epoch if they are free; how long to wait before trying again
        (0 once leading)."""
        # A node that could not reach the database or the broker leads only once it can again,
        # or it would hold a lease it cannot use while a standby that can use it waits.
        if self.health.is_down("db"):
            try:
                self._reach_database()
            except DatabaseError as exc:
                self._on_database_error()
                return self.health.down("db", exc)
            self.health.up("db")
        if self.health.is_down("broker") and self._reach_broker is not None:
            try:
                self._reach_broker()
            except Exception as exc:  # whatever the broker's client raises: it is not there
                backoff = self.health.down("broker", exc)
                if time.monotonic() < self._broker_wait_until:
                    return backoff
                # Long enough for a node that reaches the broker to have led: none did, so the
                # broker is likely down for all. Lead without it (runs wait in the ledger for
                # it), and give up the lease again after a second: wait longer next time.
                logger.warning(
                    "lease.trying_without_broker node=%s: no node reached the broker for %.0fs",
                    self.node_id,
                    self._broker_patience,
                )
                self.hold_off_broker()
            else:
                self.health.up("broker")
                self._broker_patience = self.lease.ttl * BROKER_PATIENCE
        # The lease's TTL runs from when its backend set it, which is after this instant: dating
        # its validity from here errs on the safe side (a slow reply shortens it, never extends).
        started = time.monotonic()
        try:
            acquired = self.lease.try_acquire() or self.handover.take()
        except LeaseUnavailable as exc:
            return self.health.down(self.dependency, exc)
        self.health.up(self.dependency)
        if not acquired:
            return poll_interval
        try:
            floor = self.horizon.epoch_floor
            if self.backend.fences_in_lease:
                # The acquiring UPDATE bumped the epoch on the lease's own row.
                fence = Fence.join(self.lease.token, floor)
            else:
                fence = Fence.claim(self.node_id, self.lease.token, floor)
        except DatabaseError as exc:
            self._on_database_error()
            self._quiet_release()
            return self.health.down("db", exc)
        self.health.up("db")
        if fence is None:  # the row changed hands between the two statements: not ours
            return poll_interval
        self.fence = fence
        self.valid_until = started + self.lease.ttl
        self.renew_at = started + self.renew_interval
        logger.info("lease.acquired node=%s epoch=%s", self.node_id, self.epoch)
        self._show_role()
        self.watch.judge_row(fence)
        return 0.0

    def seen_by_leader(
        self, epoch: int, writes: int, last_write_at: datetime | None
    ) -> WentBack | None:
        """The leader row as this leader's idle query read it: what was lost if the database
        went back under this term (see :meth:`.watch.RowWatch.seen_by_leader`)."""
        return self.watch.seen_by_leader(epoch, writes, last_write_at, term_epoch=self.epoch)

    def renewal_due(self) -> bool:
        return time.monotonic() >= self.renew_at

    def renew(self) -> bool:
        """Renew the lease; False (and the term ended) if it could not be proven ours."""
        started = time.monotonic()
        try:
            renewed = self.lease.renew()
        except LeaseUnavailable as exc:
            # We cannot prove we still hold the lease: stop acting as leader now.
            self.health.down(self.dependency, exc)
            metrics.get().lease_renewals.labels(result="failed").inc()
            fence = self.fence
            self.step_down(f"{self.dependency} unreachable")
            if fence is not None:
                self.handover.give_up(fence)
            return False
        self.health.up(self.dependency)
        if not renewed:
            metrics.get().lease_renewals.labels(result="lost").inc()
            kind, reason = self._lost_reason()
            metrics.get().lease_lost.labels(reason=kind).inc()
            self.step_down(reason)
            return False
        metrics.get().lease_renewals.labels(result="ok").inc()
        self.valid_until = started + self.lease.ttl
        self.renew_at = started + self.renew_interval
        return True

    def _lost_reason(self) -> tuple[str, str]:
        """Why a renewal found the lease not ours, as a metric's label and in words: another
        node holds it (``taken``), or it is ``gone`` (it expired, or it was lost: a Redis
        replica promoted without it)."""
        try:
            holder = self.lease.holder()
        except LeaseUnavailable:
            holder = None
        if holder:
            return "taken", f"taken by {node_of(holder)}"
        return "gone", "gone: it expired, or it was lost (a Redis failover to a replica without it)"

    def is_fresh(self) -> bool:
        # Stop writing well before the TTL runs out if renewals are late (a long batch, a GC
        # pause): the fence would reject stale writes anyway, this keeps them from being tried.
        return time.monotonic() < self.valid_until - self.renew_interval / 2

    def fresh_or_renewed(self) -> bool:
        """Whether this node may write now: its lease is fresh, or it was just renewed."""
        return self.is_fresh() or self.renew()

    def step_down(self, reason: str) -> None:
        """The lease was lost: stop leading (the lease is not ours to release)."""
        logger.warning("lease.lost node=%s epoch=%s reason=%s", self.node_id, self.epoch, reason)
        self.fence = None
        self._on_end()
        self._show_role()

    def release(self, reason: str) -> None:
        """Stop leading and give the lease up, so a standby takes over at once (through the
        database when the lease's backend cannot be reached: see :class:`~.handover.Handover`)."""
        fence, self.fence = self.fence, None
        self._on_end()
        self._show_role()
        try:
            released = self.lease.release()
        except LeaseUnavailable:
            released = False
            if fence is not None:
                self.handover.give_up(fence)
        if released:
            self._on_released()
        logger.info(
            "lease.released node=%s epoch=%s reason=%s released=%s",
            self.node_id,
            None if fence is None else fence.epoch,
            reason,
            released,
        )

    def hold_off_broker(self) -> None:
        """This node cannot reach the broker: leave the lease to the others for a while, longer
        each time, so that a broker down for every node does not pass the lease around."""
        self._broker_wait_until = time.monotonic() + self._broker_patience
        self._broker_patience = min(self._broker_patience * 2, self.lease.ttl * BROKER_PATIENCE_MAX)

    def report_epoch_change(self, row_epoch: int | None) -> None:
        """The leader row no longer names this term: say what happened when it went back."""
        self.watch.report_epoch_change(row_epoch, self.epoch)

    def _quiet_release(self) -> bool:
        try:
            return self.lease.release()
        except LeaseUnavailable:
            return False

    def _show_role(self) -> None:
        found = metrics.get()
        found.leader.labels(node=self.node_id).set(1 if self.is_leader else 0)
        found.lease_epoch.set(self.epoch or 0)
