"""Node reports: each scheduler node's latest status, for the admin's cluster page.

A node writes its report every ``interval`` seconds with a time to live of a few TTLs, so a node
that stopped simply drops off the page. Writing never raises (a status report must not disturb
the scheduler); reading raises :class:`~django_cluster_cron.leases.LeaseUnavailable` when the
store cannot be reached, and lists at most SCAN_LIMIT reports.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from django.db import DatabaseError, IntegrityError, connections, router
from django.db.models import Value

from ..dbconn import read_only_error
from ..dbtime import DbNow
from ..leases.base import LeaseUnavailable

if TYPE_CHECKING:  # redis-py is imported only where the Redis lease is used
    from ..leases.redis import RedisBackend

logger = logging.getLogger("django_cluster_cron.leases")

# The cluster page lists at most this many node reports.
SCAN_LIMIT = 500
# Reports of nodes gone for an hour are deleted (database), at most this often per process.
PRUNE_EVERY = 60.0


class NodeReports(Protocol):
    #: How often a scheduler node reports, seconds.
    interval: float

    def report(self, node_id: str, payload: dict[str, Any], ttl: float) -> bool:
        """Publish a node's status for ``ttl`` seconds; whether it was written. Never raises."""
        ...

    def reports(self) -> list[dict[str, Any]]:
        """Live node reports (may raise LeaseUnavailable)."""
        ...


# Whether this process's last report failed: its failures are logged once per change, where an
# operator sees them (a node that cannot write its report cannot write much else).
_failing = [False]


def _failed(exc: BaseException) -> None:
    if not _failing[0]:
        _failing[0] = True
        logger.warning("status.report_failed error=%s", " ".join(str(exc).split())[:300])


def _written() -> None:
    if _failing[0]:
        _failing[0] = False
        logger.warning("status.report_written: node reports are written again")


class RedisReports:
    """Short-lived keys ``<KEY_PREFIX>:node:<node id>`` holding JSON."""

    interval = 1.0

    def __init__(self, place: RedisBackend) -> None:
        self.place = place

    def report(self, node_id: str, payload: dict[str, Any], ttl: float) -> bool:
        try:
            self.place.client.set(
                self.place.key(f"node:{node_id}"), json.dumps(payload), px=max(1, round(ttl * 1000))
            )
        except Exception as exc:  # a status report must never disturb the scheduler
            _failed(exc)
            return False
        _written()
        return True

    def reports(self) -> list[dict[str, Any]]:
        import redis

        client = self.place.client
        found: list[dict[str, Any]] = []
        from ..leases.redis import redis_errors

        with redis_errors("reading node reports", client):
            for raw_key in client.scan_iter(match=self.place.key("node:*"), count=100):
                try:
                    raw = client.get(raw_key)
                except redis.exceptions.ResponseError:
                    continue
                if raw:
                    try:
                        found.append(json.loads(raw))
                    except ValueError:
                        continue
                if len(found) >= SCAN_LIMIT:
                    break
        return found


class DatabaseReports:
    """One ``NodeReport`` row per node, expiring by the database's clock, pruned an hour after."""

    # Rows: written every few seconds rather than every second.
    interval = 5.0
    _pruned_at = 0.0

    def report(self, node_id: str, payload: dict[str, Any], ttl: float) -> bool:
        from ..models import NodeReport

        try:
            expires = DbNow() + Value(timedelta(seconds=ttl))
            updated = NodeReport.objects.filter(node=node_id).update(
                payload=payload, seen_at=DbNow(), expires_at=expires
            )
            if not updated:
                with contextlib.suppress(IntegrityError):
                    NodeReport.objects.create(
                        node=node_id, payload=payload, seen_at=DbNow(), expires_at=expires
                    )
            # Pruned here, at most once a minute per process: reports of nodes gone for an hour
            # (an indexed range delete).
            if time.monotonic() - DatabaseReports._pruned_at > PRUNE_EVERY:
                DatabaseReports._pruned_at = time.monotonic()
                gone = DbNow() - Value(timedelta(hours=1))
                NodeReport.objects.filter(expires_at__lt=gone).delete()
        except DatabaseError as exc:  # a status report must never disturb the scheduler
            _failed(exc)
            if read_only_error(exc):  # a server that refuses writes: the connection is no use
                connections[router.db_for_write(NodeReport)].close()
            return False
        _written()
        return True

    def reports(self) -> list[dict[str, Any]]:
        from ..models import NodeReport

        try:
            rows = NodeReport.objects.filter(expires_at__gt=DbNow()).values_list(
                "payload", flat=True
            )[:SCAN_LIMIT]
            return [dict(row) for row in rows if isinstance(row, dict)]
        except DatabaseError as exc:
            raise LeaseUnavailable(f"database unreachable (reading node reports): {exc}") from exc


class MemoryReports:
    """This process's memory (tests); ``clock`` is the memory lease backend's."""

    interval = 1.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._reports: dict[str, tuple[float, dict[str, Any]]] = {}

    def report(self, node_id: str, payload: dict[str, Any], ttl: float) -> bool:
        with self._lock:
            self._reports[node_id] = (self.clock() + ttl, dict(payload))
        return True

    def reports(self) -> list[dict[str, Any]]:
        with self._lock:
            now = self.clock()
            return [dict(p) for expires, p in self._reports.values() if expires > now]
