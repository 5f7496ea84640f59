"""What the admin's cluster page shows: leader, epoch, nodes, recent runs, stuck runs, locks.

Scheduler nodes report themselves where the leases live (Redis: short-lived keys
``<KEY_PREFIX>:node:<node id>``; database: one row per node in ``NodeReport``; see
:mod:`django_cluster_cron.coordination.reports`), refreshed every second or few and expiring a
few TTLs after the node stops, so a standby that died simply disappears from the page. Every
time here is the database's (docs/explanation/guarantees.md, "one clock").
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q

from ..conf import app_settings
from ..coordination import coordination_for
from ..dbtime import database_now
from ..leases import LEADER, LOCK_PREFIX, LeaseBackend, get_backend
from ..leases.base import HeldLease, node_of
from ..models import EXECUTING_STATUSES, JobRun, RunStatus, SchedulerLease

logger = logging.getLogger("django_cluster_cron.status")


@dataclass
class ClusterStatus:
    now: datetime
    leader_token: str | None = None
    lease_left: float | None = None
    epoch: int | None = None
    epoch_holder: str = ""
    acquired_at: datetime | None = None
    last_write_at: datetime | None = None
    nodes: list[dict[str, Any]] = field(default_factory=list)
    runs_last_hour: dict[str, int] = field(default_factory=dict)
    stuck: list[JobRun] = field(default_factory=list)
    # Runs recorded ahead of their time (not due yet), and the first of their due times.
    ahead: int = 0
    ahead_next: datetime | None = None
    # The held cluster locks as the page lists them (names without the ``lock:`` prefix).
    locks: list[HeldLease] = field(default_factory=list)
    backend: str = ""
    # The lease backend could not be read (Redis or the database down): what was said.
    backend_error: str = ""

    @property
    def leader_node(self) -> str | None:
        return node_of(self.leader_token)

    @property
    def leader_report(self) -> dict[str, Any] | None:
        """The node report of the node that holds the lease, if it has reported."""
        return _report_of(self.nodes, self.leader_node)

    @property
    def redis_error(self) -> str:
        return self.backend_error if self.backend == "redis" else ""


def cluster_status(now: datetime | None = None, *, runs: bool = True) -> ClusterStatus:
    """What the cluster page shows. ``runs=False`` leaves out the run counts and stuck runs (the
    health checks read bounded views of the ledger themselves)."""
    now = now or database_now()
    status = ClusterStatus(now=now)
    lease = SchedulerLease.objects.filter(name="leader").first()
    if lease is not None:
        status.epoch = lease.epoch
        status.epoch_holder = lease.holder
        status.acquired_at = lease.acquired_at
        status.last_write_at = lease.last_write_at
    if runs:
        hour_ago = now - timedelta(hours=1)
        status.runs_last_hour = dict(
            JobRun.objects.filter(scheduled_for__gte=hour_ago, scheduled_for__lte=now)
            .values_list("status")
            .annotate(n=Count("pk"))
            .order_by()
        )
        status.stuck = list(stuck_runs(now)[:20])
        recorded = JobRun.objects.filter(status=RunStatus.PENDING, due_at__gt=now).aggregate(
            n=Count("pk"), first=Min("due_at")
        )
        status.ahead, status.ahead_next = recorded["n"] or 0, recorded["first"]
    backend = get_backend()
    status.backend = backend.name
    try:
        _read_backend(status, backend)
    except Exception as exc:
        status.backend_error = f"{type(exc).__name__}: {exc}"
    finally:
        # A web server's thread reads this page now and then: it keeps no lease connection.
        from ..leases.database import close_private_connection

        close_private_connection()
    return status


def leader_report() -> dict[str, Any] | None:
    """The node report of the node that holds the lease (None: no leader, or it has not
    reported): the lease backend alone, not the database's lease row or the locks."""
    backend = get_backend()
    try:
        leader = node_of(backend.lease(LEADER, "cluster-page", 1.0).holder())
        if leader is None:
            return None
        reports = coordination_for(backend).reports.reports()
    finally:
        from ..leases.database import close_private_connection

        close_private_connection()
    return _report_of(reports, leader)


def _report_of(reports: list[dict[str, Any]], node: str | None) -> dict[str, Any] | None:
    return next((r for r in reports if node is not None and r.get("node") == node), None)


def stuck_runs(now: datetime) -> Any:
    """Runs waiting too long for a worker (counted from their due time: a run recorded ahead
    waits for it), or running without a recent heartbeat."""
    waiting_limit = now - 2 * app_settings.OUTBOX_REPUBLISH_AFTER
    silent_limit = now - app_settings.RUN_LOST_AFTER
    waited = Q(due_at__lt=waiting_limit) | Q(due_at__isnull=True, created_at__lt=waiting_limit)
    return (
        JobRun.objects.select_related("job")
        .filter(
            (Q(status__in=[RunStatus.PENDING, RunStatus.QUEUED]) & waited)
            | Q(status__in=EXECUTING_STATUSES, heartbeat_at__lt=silent_limit)
        )
        .order_by("scheduled_for")
    )


def _read_backend(status: ClusterStatus, backend: LeaseBackend) -> None:
    lease = backend.lease(LEADER, "cluster-page", 1.0)
    status.leader_token = lease.holder()
    if status.leader_token is not None:
        status.lease_left = lease.remaining()
    status.nodes = coordination_for(backend).reports.reports()
    status.nodes.sort(key=lambda n: (n.get("role") != "leader", str(n.get("node"))))
    status.locks = backend.held(LOCK_PREFIX)


def force_release_lock(name: str) -> bool:
    """Free a cluster lock whatever its owner (an operator's last resort)."""
    deleted = get_backend().force_release(LOCK_PREFIX + name)
    logger.warning("lock.force_released name=%s deleted=%s", name, deleted)
    return deleted


# Where a site with no leader reporting keeps its own count of the ledger, and how old that
# count may grow before a page view starts a new one.
LEDGER_KEY = "django_cluster_cron:ledger_counts"
LEDGER_MAX_AGE = 60.0
_COUNTING_KEY = LEDGER_KEY + ":counting"


def ledger_counts() -> dict[str, Any] | None:
    """The ledger's size for the pages (``ledger.counts.measure``), never counted on the page
    view itself: as the leader last measured it (its node report), or, while no leader reports
    one, as this site last counted it in Django's cache. A page that finds the cached count
    missing or older than LEDGER_MAX_AGE starts a count on a thread of its own (one at a time
    across the site) and shows what there is meanwhile: None the first time."""
    report = leader_report()
    found = None if report is None else report.get("ledger")
    if isinstance(found, dict):
        return found
    from django.core.cache import cache

    cached = cache.get(LEDGER_KEY)
    cached = cached if isinstance(cached, dict) else None
    at = None if cached is None else cached.get("at")
    if (not isinstance(at, (int, float)) or time.time() - at > LEDGER_MAX_AGE) and cache.add(
        _COUNTING_KEY, 1, timeout=int(4 * LEDGER_MAX_AGE)
    ):
        threading.Thread(target=_count_ledger, name="cluster-cron-count", daemon=True).start()
    return cached


def _count_ledger() -> None:
    from django.core.cache import cache
    from django.db import connections

    from ..ledger.counts import measure

    try:
        cache.set(LEDGER_KEY, measure(), timeout=int(60 * LEDGER_MAX_AGE))
    except Exception:  # a thread's traceback would go to stderr, unlabelled
        logger.exception("ledger.count_failed")
    finally:
        try:
            cache.delete(_COUNTING_KEY)
        finally:
            connections.close_all()  # this thread's
