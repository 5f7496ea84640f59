"""What the scheduler nodes share besides leases: node reports (the cluster page), counters
(duplicate deliveries dropped) and the change signal that wakes sleeping schedulers.

Each lives where the leases live (``CLUSTER_CRON["LEASE_BACKEND"]``): Redis keys and pub/sub,
database rows and PostgreSQL's ``NOTIFY``, or one process's memory in tests. Each role is a module
of its own with its three implementations: :mod:`.reports`, :mod:`.counters`, :mod:`.changes`.
:func:`coordination_for` gives a lease backend's, :func:`get_coordination` the project's.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..leases import LeaseBackend, get_backend
from .changes import (
    ChangeSignal,
    DatabaseChanges,
    MemoryChanges,
    RedisChanges,
    Sleeper,
)
from .counters import Counters, DatabaseCounters, MemoryCounters, RedisCounters
from .reports import DatabaseReports, MemoryReports, NodeReports, RedisReports

if TYPE_CHECKING:  # redis-py is imported only where the Redis lease is used
    from ..leases.redis import RedisBackend

__all__ = [
    "ChangeSignal",
    "Coordination",
    "Counters",
    "NodeReports",
    "Sleeper",
    "coordination_for",
    "get_coordination",
    "job_changed",
    "publish_change",
]


@dataclass(frozen=True)
class Coordination:
    reports: NodeReports
    counters: Counters
    changes: ChangeSignal


# A memory lease backend's companions, one set per backend object (its clock is theirs).
_memory: weakref.WeakKeyDictionary[Any, Coordination] = weakref.WeakKeyDictionary()
_memory_lock = threading.Lock()


def coordination_for(backend: LeaseBackend) -> Coordination:
    """The reports, counters and change signal that live where ``backend`` keeps its leases."""
    if backend.name == "redis":
        redis_backend = cast("RedisBackend", backend)
        return Coordination(
            RedisReports(redis_backend), RedisCounters(redis_backend), RedisChanges(redis_backend)
        )
    if backend.name == "database":
        return Coordination(DatabaseReports(), DatabaseCounters(), DatabaseChanges())
    with _memory_lock:
        found = _memory.get(backend)
        if found is None:
            clock = getattr(backend, "clock", None)
            reports = MemoryReports(clock) if clock is not None else MemoryReports()
            found = _memory[backend] = Coordination(reports, MemoryCounters(), MemoryChanges())
        return found


def get_coordination() -> Coordination:
    """The project's: where the configured lease backend keeps its leases."""
    return coordination_for(get_backend())


def publish_change(reason: str) -> None:
    """Tell the schedulers something changed. Never raises: the timeout is the fallback."""
    get_coordination().changes.publish(reason)


def job_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``post_save``/``post_delete`` receiver for JobDefinition."""
    from django.db import transaction

    transaction.on_commit(lambda: publish_change(f"job:{instance.pk}"))
