"""An in-memory lease backend: one process's leases, for unit tests and users' own tests.

It behaves like the real backends (owner tokens, expiry, conditional renew and release) but
coordinates only the threads of one process: never use it where two
processes must exclude each other. Time is ``time.monotonic`` unless a clock is given, so tests
can move it by hand::

    from django_cluster_cron.testing import MemoryLeaseBackend

    backend = MemoryLeaseBackend(clock=lambda: fake_now)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .base import HeldLease, OwnedLease

__all__ = ["MemoryLease", "MemoryLeaseBackend"]


@dataclass
class _Entry:
    token: str
    expires: float


class MemoryLease(OwnedLease):
    def __init__(self, backend: MemoryLeaseBackend, name: str, node_id: str, ttl: float) -> None:
        super().__init__(name, node_id, ttl)
        self.backend = backend

    def try_acquire(self) -> bool:
        with self.backend.lock:
            entry = self.backend.live(self.name)
            if entry is not None and entry.token != self.token:
                return False
            self.backend.entries[self.name] = _Entry(self.token, self.backend.clock() + self.ttl)
            return True

    def renew(self, ttl: float | None = None) -> bool:
        with self.backend.lock:
            entry = self.backend.live(self.name)
            if entry is None or entry.token != self.token:
                return False
            entry.expires = self.backend.clock() + (self.ttl if ttl is None else ttl)
            return True

    def release(self) -> bool:
        with self.backend.lock:
            entry = self.backend.live(self.name)
            if entry is None or entry.token != self.token:
                return False
            del self.backend.entries[self.name]
            return True

    def holder(self) -> str | None:
        with self.backend.lock:
            entry = self.backend.live(self.name)
            return entry.token if entry else None

    def remaining(self) -> float | None:
        with self.backend.lock:
            entry = self.backend.live(self.name)
            if entry is None:
                return None
            return entry.expires - self.backend.clock()


class MemoryLeaseBackend:
    """Leases in this process's memory (its node reports, counters and change signal are
    :mod:`django_cluster_cron.coordination`'s memory ones)."""

    name = "memory"
    fences_in_lease = False

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.entries: dict[str, _Entry] = {}

    def live(self, name: str) -> _Entry | None:
        entry = self.entries.get(name)
        if entry is not None and entry.expires <= self.clock():
            del self.entries[name]
            return None
        return entry

    def lease(self, name: str, node_id: str, ttl: float) -> MemoryLease:
        return MemoryLease(self, name, node_id, ttl)

    def held(self, prefix: str) -> list[HeldLease]:
        with self.lock:
            names = sorted(n for n in self.entries if n.startswith(prefix))
            found = []
            for name in names:
                entry = self.live(name)
                if entry is not None:
                    found.append(
                        HeldLease(name[len(prefix) :], entry.token, entry.expires - self.clock())
                    )
            return found

    def force_release(self, name: str) -> bool:
        with self.lock:
            return self.live(name) is not None and self.entries.pop(name, None) is not None

    def release_held_by(self, name: str, token: str) -> bool:
        with self.lock:
            entry = self.live(name)
            if entry is None or entry.token != token:
                return False
            del self.entries[name]
            return True
