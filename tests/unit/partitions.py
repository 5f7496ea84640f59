"""Partitioned leadership, the protocol: designed and simulated, not built, and so not part of the
app — it lives beside its simulation (test_partition_simulation.py).

See docs/explanation/scaling.md. Jobs map to ``K`` partitions by a stable hash of their id; each
partition has a lease of its own (owner token, valid-until on the database's clock, fencing
epoch) exactly like today's single leader lease, and a node leads the partitions it holds. What
this module decides, purely, is *which* partitions a node should try to take, renew or give up,
from what it can read in one query: every partition's lease row and the nodes that reported
recently. The guarantees do not rest on it — one run per slot still comes from the database's
unique constraint and the per-partition epoch fence — it decides who leads, quickly and without
flapping.

The rule, for ``n`` live nodes and ``K`` partitions:

* **Preference** is rendezvous hashing: node ``a`` prefers partition ``p`` more than node ``b``
  does if ``weight(a, p) > weight(b, p)``; every node computes the same order from the same
  membership, with no coordination.
* **Quota**: a node aims to hold ``floor(K / n)`` of its most-preferred partitions (``K mod n``
  nodes one more), so the load is balanced to within one partition while everyone is live.
* **Take** a partition whose lease is free or expired if it is among the node's preferred ones,
  or, after ``orphan_grace``, any expired one (the preferred node may be down before the
  membership shows it: leadership must not wait for that).
* **Give up** (release, so the preferred node takes it at once) a partition that another node
  prefers, once that node has reported for ``settle`` without a gap (a node that just joined
  pulls nothing until it is known to be stable, so a flapping node cannot make partitions flap)
  and once this node has held the partition for ``settle`` (which bounds any back-and-forth while
  two nodes' views of the membership differ).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "LeaseView",
    "Member",
    "Plan",
    "partition_of",
    "plan",
    "preferred",
    "weight",
]


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def partition_of(job_id: int, partitions: int) -> int:
    """The partition of a job: a stable hash of its id (not Python's ``hash``), 0..K-1."""
    if partitions < 1:
        raise ValueError("there must be at least one partition")
    return _hash(f"job:{job_id}") % partitions


@functools.lru_cache(maxsize=65_536)
def weight(node: str, partition: int) -> int:
    """Rendezvous weight: how much ``node`` wants ``partition`` (the same on every host)."""
    return _hash(f"{node}/{partition}")


@dataclass(frozen=True)
class LeaseView:
    """A partition's lease row as read: who holds it and until when (database time, seconds;
    a partition never held has no owner and ``valid_until`` 0)."""

    owner: str | None
    valid_until: float


@dataclass(frozen=True)
class Member:
    """A node that reported recently, and since when it has been reporting without a gap."""

    node: str
    since: float


@dataclass
class Plan:
    take: list[int] = field(default_factory=list)
    renew: list[int] = field(default_factory=list)
    release: list[int] = field(default_factory=list)


def preferred(node: str, members: Iterable[str], partitions: int) -> list[int]:
    """The partitions ``node`` should hold when ``members`` (including it) are all live: the
    node's share of a balanced assignment in rendezvous order."""
    nodes = tuple(sorted(set(members) | {node}))
    return sorted(p for p, owner in _assignment(nodes, partitions).items() if owner == node)


@functools.lru_cache(maxsize=256)
def _assignment(nodes: tuple[str, ...], partitions: int) -> dict[int, str]:
    """Partition -> node for a membership (cached: a membership changes rarely)."""
    # Each node holds floor(K/n) partitions, and K mod n of them one more: partitions taken in
    # order of their best weight, each to its highest-weight node that still has room, the
    # extra places going to whoever asks first. Every node computes the same assignment.
    base, extra = divmod(partitions, len(nodes))
    load = dict.fromkeys(nodes, 0)
    owner: dict[int, str] = {}
    weights = {
        p: sorted(((weight(n, p), n) for n in nodes), reverse=True) for p in range(partitions)
    }
    for p in sorted(range(partitions), key=lambda p: weights[p][0], reverse=True):
        for _, candidate in weights[p]:
            if load[candidate] < base or (load[candidate] == base and extra > 0):
                if load[candidate] == base:
                    extra -= 1
                owner[p] = candidate
                load[candidate] += 1
                break
    return owner


def plan(
    node: str,
    now: float,
    leases: Mapping[int, LeaseView],
    members: Sequence[Member],
    partitions: int,
    *,
    held_since: Mapping[int, float],
    settle: float,
    orphan_grace: float,
) -> Plan:
    """What ``node`` does this round, from the lease rows and the membership it read.

    ``members``: the nodes that reported within the membership timeout (``node`` is counted
    whatever they say). ``held_since``: when this node took each partition it holds — a
    partition is given up no sooner than ``settle`` after it was taken, which bounds any
    back-and-forth while two nodes' views of the membership differ.
    """
    stable = {m.node for m in members if now - m.since >= settle} | {node}
    mine = set(preferred(node, stable, partitions))
    result = Plan()
    held = sorted(
        p for p, lease in leases.items() if lease.owner == node and lease.valid_until > now
    )
    # A partition assigned to another stable node (one adopted while that node was down or not
    # yet known) goes back to it, not before this node has held it for ``settle``.
    keep = [p for p in held if p in mine]
    for p in held:
        if p in mine:
            continue
        # Another stable node prefers it: hand it over once this node has held it a while.
        if now - held_since.get(p, now) >= settle:
            result.release.append(p)
        else:
            keep.append(p)
    result.renew = sorted(keep)
    for p in range(partitions):
        lease = leases.get(p, LeaseView(None, 0.0))
        if lease.owner is not None and lease.valid_until > now:
            continue  # held (by this node: renewed above; by another: not ours to take)
        orphaned = now - lease.valid_until >= orphan_grace
        if p in mine or orphaned:
            result.take.append(p)
    return result
