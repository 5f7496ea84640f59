"""What the admin's cluster page shows: leader, epoch, nodes, recent runs, stuck runs, locks.

Scheduler nodes report themselves in short-lived Redis keys ``<KEY_PREFIX>:node:<node id>``
(JSON; refreshed at most once a second, expiring a few TTLs after the node stops), so a standby
that died simply disappears from the page.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone

from .conf import app_settings
from .models import JobRun, RunStatus, SchedulerLease

logger = logging.getLogger("django_cluster_cron.status")

SCAN_LIMIT = 500


def _key(suffix: str) -> str:
    return f"{app_settings.KEY_PREFIX}:{suffix}"


def report_node(
    client: Any,
    *,
    node_id: str,
    epoch: int | None,
    last_tick: datetime | None,
    lag: float | None,
    ttl: float,
) -> None:
    payload = {
        "node": node_id,
        "role": "leader" if epoch is not None else "standby",
        "epoch": epoch,
        "seen": timezone.now().isoformat(),
        "last_tick": last_tick.isoformat() if last_tick else None,
        "lag": lag,
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    try:
        client.set(_key(f"node:{node_id}"), json.dumps(payload), ex=max(1, math.ceil(ttl)))
    except Exception as exc:  # a status report must never disturb the scheduler
        logger.debug("status.report_failed error=%s", exc)


@dataclass
class HeldLock:
    name: str
    owner: str
    ttl: float | None


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
    locks: list[HeldLock] = field(default_factory=list)
    redis_error: str = ""

    @property
    def leader_node(self) -> str | None:
        return self.leader_token.rsplit(":", 1)[0] if self.leader_token else None


def _redis() -> Any:
    from django_redis import get_redis_connection

    return get_redis_connection(app_settings.REDIS_ALIAS)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def cluster_status(now: datetime | None = None) -> ClusterStatus:
    now = now or timezone.now()
    status = ClusterStatus(now=now)
    lease = SchedulerLease.objects.filter(name="leader").first()
    if lease is not None:
        status.epoch = lease.epoch
        status.epoch_holder = lease.holder
        status.acquired_at = lease.acquired_at
        status.last_write_at = lease.last_write_at
    hour_ago = now - timedelta(hours=1)
    status.runs_last_hour = dict(
        JobRun.objects.filter(scheduled_for__gte=hour_ago, scheduled_for__lte=now)
        .values_list("status")
        .annotate(n=Count("pk"))
        .order_by()
    )
    status.stuck = list(stuck_runs(now)[:20])
    try:
        _read_redis(status)
    except Exception as exc:
        status.redis_error = f"{type(exc).__name__}: {exc}"
    return status


def stuck_runs(now: datetime) -> Any:
    """Runs waiting too long for a worker, or running without a recent heartbeat."""
    waiting_limit = now - 2 * app_settings.OUTBOX_REPUBLISH_AFTER
    silent_limit = now - app_settings.RUN_LOST_AFTER
    return (
        JobRun.objects.select_related("job")
        .filter(
            Q(status__in=[RunStatus.PENDING, RunStatus.QUEUED], created_at__lt=waiting_limit)
            | Q(status=RunStatus.RUNNING, heartbeat_at__lt=silent_limit)
        )
        .order_by("scheduled_for")
    )


def _read_redis(status: ClusterStatus) -> None:
    client = _redis()
    token = client.get(_key("leader"))
    status.leader_token = _text(token) if token is not None else None
    if token is not None:
        pttl = client.pttl(_key("leader"))
        status.lease_left = pttl / 1000 if pttl and pttl > 0 else None
    for raw_key in client.scan_iter(match=_key("node:*"), count=100):
        raw = client.get(raw_key)
        if raw:
            try:
                status.nodes.append(json.loads(raw))
            except ValueError:
                continue
        if len(status.nodes) >= SCAN_LIMIT:
            break
    status.nodes.sort(key=lambda n: (n.get("role") != "leader", str(n.get("node"))))
    prefix = _key("lock:")
    for raw_key in client.scan_iter(match=prefix + "*", count=100):
        name = _text(raw_key)[len(prefix) :]
        try:
            owner = client.get(raw_key)
        except Exception:  # junk of another type under our prefix: show it, do not fail
            owner = b"(not a lock: wrong type)"
        pttl = client.pttl(raw_key)
        status.locks.append(
            HeldLock(
                name=name,
                owner=_text(owner) if owner is not None else "?",
                ttl=pttl / 1000 if pttl and pttl > 0 else None,
            )
        )
        if len(status.locks) >= SCAN_LIMIT:
            break
    status.locks.sort(key=lambda lock: lock.name)


def force_release_lock(name: str) -> bool:
    """Delete a cluster lock whatever its owner (an operator's last resort)."""
    deleted = bool(_redis().delete(_key(f"lock:{name}")))
    logger.warning("lock.force_released name=%s deleted=%s", name, deleted)
    return deleted
