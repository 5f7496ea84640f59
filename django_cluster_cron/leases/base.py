"""The lease interface, and the coordination backend that hands leases out.

A *lease* names who holds something for a while: the scheduler's leadership (name ``leader``)
or a cluster lock (name ``lock:<name>``). Each lease object carries a fresh owner token
(``"<node id>:<random hex>"``), so two processes never mistake each other's lease for their
own, even on one host with one node id. Three operations change it, each conditional on that
token: :meth:`Lease.try_acquire` (free, expired, or already ours), :meth:`Lease.renew` (still
ours) and :meth:`Lease.release` (ours: never another holder's).

A lease is for liveness and efficiency only. It keeps standbys idle and bounds failover time; it
is not what makes a slot run once (the database does that: unique constraints, conditional
updates and a fencing epoch). Never act on "I hold the lease" alone.

A *backend* (:class:`LeaseBackend`) is where leases live: Redis (:mod:`.redis`), the database
(:mod:`.database`) or, for tests, one process's memory (:mod:`.memory`). Chosen by
``CLUSTER_CRON["LEASE_BACKEND"]``; see :func:`django_cluster_cron.leases.get_backend`. What the
nodes share besides leases (node reports, counters, the change signal) lives in the same place
and is :mod:`django_cluster_cron.coordination`.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Protocol

LEADER = "leader"
LOCK_PREFIX = "lock:"


class LeaseUnavailable(Exception):
    """The backend could not be reached (Redis or the database down, a timeout, a reset)."""


def new_token(node_id: str) -> str:
    """A fresh owner token: the node id (for people) and a random part (for uniqueness)."""
    return f"{node_id}:{uuid.uuid4().hex}"


def check_lease_args(name: str, node_id: str, ttl: float) -> None:
    if not name:
        raise ValueError("the lease name must be a non-empty string")
    if not node_id:
        raise ValueError("node_id must be a non-empty string")
    if not math.isfinite(ttl) or ttl < 0.001:
        raise ValueError(f"ttl must be a finite number of seconds >= 0.001, got {ttl!r}")


class OwnedLease:
    """What every lease object holds: its name, owner, TTL and a fresh owner token."""

    def __init__(self, name: str, node_id: str, ttl: float) -> None:
        check_lease_args(name, node_id, ttl)
        self.name = name
        self.node_id = node_id
        self.ttl = float(ttl)
        self.token = new_token(node_id)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} token={self.token!r} ttl={self.ttl:g}s>"


def node_of(token: str | None) -> str | None:
    """The node id part of an owner token."""
    return token.rsplit(":", 1)[0] if token else None


class Lease(Protocol):
    """One owner's handle on a named lease. Every method may raise :class:`LeaseUnavailable`."""

    name: str
    node_id: str
    token: str
    ttl: float

    def try_acquire(self) -> bool:
        """Take the lease if it is free or expired, or re-arm it if it is already ours.

        Safe to retry after a timeout: if the first attempt did land, the retry finds our own
        token and re-arms it.
        """
        ...

    def renew(self, ttl: float | None = None) -> bool:
        """Re-arm the TTL (or set it to ``ttl`` seconds) if the lease is still ours and live."""
        ...

    def release(self) -> bool:
        """Give the lease up if it is ours; True if this call released it."""
        ...

    def holder(self) -> str | None:
        """The current holder's token, or None if the lease is free."""
        ...

    def remaining(self) -> float | None:
        """Seconds until it expires; None if free, ``math.inf`` if it never expires."""
        ...


@dataclass(frozen=True)
class HeldLease:
    """A lease somebody holds, as the cluster page lists it (by :attr:`node`: the owner token
    itself is never shown)."""

    name: str
    owner: str
    ttl: float | None

    @property
    def node(self) -> str:
        return node_of(self.owner) or "?"


class LeaseBackend(Protocol):
    """Where leases live: hands them out and lists or frees them for operators."""

    #: ``"redis"``, ``"database"`` or ``"memory"``.
    name: str
    #: True when taking a lease bumps its fencing epoch in the database itself (the database
    #: lease keeps token, validity and epoch on one row); False when the scheduler must bump the
    #: epoch after acquiring (Redis, memory).
    fences_in_lease: bool

    def lease(self, name: str, node_id: str, ttl: float) -> Lease: ...

    def held(self, prefix: str) -> list[HeldLease]:
        """Leases under ``prefix`` that somebody holds (at most a few hundred)."""
        ...

    def force_release(self, name: str) -> bool:
        """Free ``name`` whoever holds it (an operator's last resort); True if it was held."""
        ...

    def release_held_by(self, name: str, token: str) -> bool:
        """Free ``name`` if the owner ``token`` holds it (never another holder's); True if this
        call freed it. For a holder that gave its lease up where it could still write."""
        ...
