"""Cluster-wide counters, e.g. the deliveries the workers' claim dropped as duplicates, and
small numbers the nodes remember together (the message form the workers were found to run).

Adding and setting never raise (neither is worth failing anything for); reading may raise
:class:`~django_cluster_cron.leases.LeaseUnavailable` when the store cannot be reached.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Protocol

from django.db import DatabaseError, IntegrityError
from django.db.models import F

if TYPE_CHECKING:  # redis-py is imported only where the Redis lease is used
    from ..leases.redis import RedisBackend


logger = logging.getLogger("django_cluster_cron.leases")


class Counters(Protocol):
    def incr(self, counter: str) -> None:
        """Add one. Never raises."""
        ...

    def put(self, counter: str, value: int) -> None:
        """Set it to ``value``. Never raises."""
        ...

    def value(self, counter: str) -> int: ...


class RedisCounters:
    """Keys ``<KEY_PREFIX>:stats:<counter>``."""

    def __init__(self, place: RedisBackend) -> None:
        self.place = place

    def incr(self, counter: str) -> None:
        try:
            self.place.client.incr(self.place.key(f"stats:{counter}"))
        except Exception as exc:  # a statistic: never worth failing anything for
            logger.debug("stats.incr_failed counter=%s error=%s", counter, exc)

    def put(self, counter: str, value: int) -> None:
        try:
            self.place.client.set(self.place.key(f"stats:{counter}"), value)
        except Exception as exc:
            logger.debug("stats.put_failed counter=%s error=%s", counter, exc)

    def value(self, counter: str) -> int:
        from ..leases.redis import redis_errors

        with redis_errors(f"reading counter {counter!r}", self.place.client):
            found = self.place.client.get(self.place.key(f"stats:{counter}"))
        return int(found or 0)


class DatabaseCounters:
    """One ``ClusterCounter`` row per counter."""

    def incr(self, counter: str) -> None:
        from ..models import ClusterCounter

        rows = ClusterCounter.objects.filter(name=counter)
        try:
            if not rows.update(value=F("value") + 1):
                try:
                    ClusterCounter.objects.create(name=counter, value=1)
                except IntegrityError:
                    rows.update(value=F("value") + 1)
        except DatabaseError as exc:  # a statistic: never worth failing anything for
            logger.debug("stats.incr_failed counter=%s error=%s", counter, exc)

    def put(self, counter: str, value: int) -> None:
        from ..models import ClusterCounter

        try:
            ClusterCounter.objects.update_or_create(name=counter, defaults={"value": value})
        except DatabaseError as exc:
            logger.debug("stats.put_failed counter=%s error=%s", counter, exc)

    def value(self, counter: str) -> int:
        from ..models import ClusterCounter

        found = ClusterCounter.objects.filter(name=counter).values_list("value", flat=True).first()
        return int(found or 0)


class MemoryCounters:
    """This process's memory (tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def incr(self, counter: str) -> None:
        with self._lock:
            self._counts[counter] = self._counts.get(counter, 0) + 1

    def put(self, counter: str, value: int) -> None:
        with self._lock:
            self._counts[counter] = value

    def value(self, counter: str) -> int:
        with self._lock:
            return self._counts.get(counter, 0)
