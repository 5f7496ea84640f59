"""Partitioned leadership, proven before it is built: a seeded, deterministic simulation of N
scheduler nodes and K partitions (docs/explanation/scaling.md).

No I/O and no real time: an event queue drives the nodes, and a model of the database holds
what the real one would — one lease row per partition (owner, valid-until on the database's
clock, epoch), each job's watermark, and the recorded runs — with the same conditional
statements the real scheduler uses (acquire if free or expired, bumping the epoch on a change of
owner; renew and release on owner and epoch; record slots and advance the watermark in one
write fenced by the partition's epoch). The run table has *no* unique constraint here, so a
second run of a slot would show: the fence and the watermark alone must prevent it.

Faults, drawn from the seed during the first part of each schedule: crashes (a node comes back
later under a new identity, as a restarted process does), pauses longer than the lease TTL
(also between a node's read and its writes, so it writes from a stale view), and steps of a
node's wall clock. The last part of each schedule is quiet. Checked for every seed:

1. one run per slot (no slot recorded twice);
2. no lost slot (every slot due before the end, less the takeover bound, is recorded);
3. every partition led within the bound whenever a node is up;
4. balance once quiet: every partition held, each live node holding floor(K/n) or ceil(K/n);
5. no flapping once settled: no partition changes owner in the quiet tail.
"""

from __future__ import annotations

import heapq
import math
import os
import random
from dataclasses import dataclass, field

import pytest

from tests.support.processes import printed_in_processes
from tests.unit.partitions import (
    LeaseView,
    Member,
    partition_of,
    plan,
    preferred,
    weight,
)

TTL = 10.0
POLL = 1.0
SETTLE = 2 * TTL  # a member counts once it has reported this long; a take is kept this long
MEMBER_TIMEOUT = TTL  # a node that has not reported for this long is out of the membership
ORPHAN_GRACE = TTL  # an expired lease anyone may take, after the preferred node had its chance
DURATION = 240.0
QUIET = 90.0  # no fault in the last QUIET seconds
# Counted from the lease's expiry: the preferred node takes a partition at its next round once the
# membership has dropped a dead holder (MEMBER_TIMEOUT), anyone after ORPHAN_GRACE.
LEADERLESS_BOUND = max(MEMBER_TIMEOUT, ORPHAN_GRACE) + 2 * POLL
SEEDS = int(os.environ.get("PARTITION_SIM_SEEDS", "1000"))


@dataclass
class Lease:
    owner: str | None = None
    valid_until: float = 0.0
    epoch: int = 0


@dataclass
class Database:
    """The rows the protocol reads and writes, on the database's clock (``now``)."""

    partitions: int
    jobs: dict[int, float]  # job id -> period (seconds)
    now: float = 0.0
    leases: dict[int, Lease] = field(default_factory=dict)
    watermark: dict[int, float] = field(default_factory=dict)  # job -> last slot decided
    runs: dict[tuple[int, float], int] = field(default_factory=dict)  # (job, slot) -> copies
    reports: dict[str, tuple[float, float]] = field(default_factory=dict)  # node -> (since, last)
    owner_changes: list[tuple[float, int, str | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.leases = {p: Lease() for p in range(self.partitions)}
        self.watermark = dict.fromkeys(self.jobs, 0.0)
        self.by_partition: dict[int, list[int]] = {p: [] for p in range(self.partitions)}
        for job in self.jobs:
            self.by_partition[partition_of(job, self.partitions)].append(job)

    def report(self, node: str) -> None:
        since, last = self.reports.get(node, (self.now, self.now))
        if self.now - last > MEMBER_TIMEOUT:
            since = self.now  # a gap: it starts over
        self.reports[node] = (since, self.now)

    def members(self) -> list[Member]:
        return [
            Member(node, since)
            for node, (since, last) in self.reports.items()
            if self.now - last <= MEMBER_TIMEOUT
        ]

    def acquire(self, p: int, node: str) -> int | None:
        lease = self.leases[p]
        if lease.owner not in (None, node) and lease.valid_until > self.now:
            return None
        if lease.owner != node or lease.valid_until <= self.now:
            lease.epoch += 1
            self.owner_changes.append((self.now, p, node))
        lease.owner, lease.valid_until = node, self.now + TTL
        return lease.epoch

    def renew(self, p: int, node: str, epoch: int) -> bool:
        lease = self.leases[p]
        if lease.owner != node or lease.epoch != epoch or lease.valid_until <= self.now:
            return False
        lease.valid_until = self.now + TTL
        return True

    def release(self, p: int, node: str, epoch: int) -> None:
        lease = self.leases[p]
        if lease.owner == node and lease.epoch == epoch:
            lease.owner, lease.valid_until = None, self.now
            self.owner_changes.append((self.now, p, None))

    def record(self, p: int, node: str, epoch: int) -> bool:
        """Record every due slot of the partition's jobs and advance their watermarks: one
        write, fenced by the partition's owner and epoch (the lease may have run out with no
        one else taking it: the epoch is the fence, as in the real scheduler)."""
        lease = self.leases[p]
        if lease.owner != node or lease.epoch != epoch:
            return False
        for job in self.by_partition[p]:
            period = self.jobs[job]
            slot = self.watermark[job] + period
            while slot <= self.now:
                self.runs[(job, slot)] = self.runs.get((job, slot), 0) + 1
                self.watermark[job] = slot
                slot += period
        return True


@dataclass
class Node:
    name: str
    started: float = 0.0  # its process starts then (a restart is scheduled ahead)
    up: bool = True
    paused_until: float = 0.0
    clock_offset: float = 0.0  # its wall clock minus the database's
    held: dict[int, int] = field(default_factory=dict)  # partition -> epoch it holds
    held_since: dict[int, float] = field(default_factory=dict)


class Simulation:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        rng = self.rng
        self.partitions = rng.choice([1, 2, 4, 8, 16, 32])
        jobs = {job: float(rng.choice([1, 2, 3, 5, 7, 10, 15])) for job in range(1, 41)}
        self.db = Database(self.partitions, jobs)
        self.nodes: dict[str, Node] = {}
        self.queue: list[tuple[float, int, str, str]] = []
        self.counter = 0
        for i in range(rng.randint(1, 6)):
            self._start(f"n{i}.0", rng.uniform(0, POLL))
        self._faults()
        self.up_intervals: list[tuple[float, float]] = []

    def _push(self, at: float, kind: str, node: str) -> None:
        self.counter += 1
        heapq.heappush(self.queue, (at, self.counter, kind, node))

    def _start(self, name: str, at: float) -> None:
        self.nodes[name] = Node(name, started=at)
        self._push(at, "round", name)

    def _faults(self) -> None:
        rng = self.rng
        for _ in range(rng.randint(0, 8)):
            at = rng.uniform(5, DURATION - QUIET - 30)
            kind = rng.choice(["crash", "pause", "pause", "clock", "stale"])
            self._push(at, kind, rng.choice(sorted(self.nodes)))

    # -- a node's round: read (one query), decide, write -----------------------------------

    def _round(self, node: Node, stale_write_delay: float = 0.0) -> None:
        db = self.db
        db.report(node.name)
        # What the node reads: the lease rows and the membership, and the database's time (in
        # the same query); decisions are made on that time, not its own clock.
        seen = db.now
        leases = {p: LeaseView(lease.owner, lease.valid_until) for p, lease in db.leases.items()}
        members = db.members()
        node.held = {
            p: e for p, e in node.held.items() if leases[p].owner == node.name
        }  # what the rows say it still holds
        decided = plan(
            node.name,
            seen,
            leases,
            members,
            self.partitions,
            held_since=node.held_since,
            settle=SETTLE,
            orphan_grace=ORPHAN_GRACE,
        )
        if stale_write_delay:
            # Frozen between the read and the writes: they land later, from a stale view.
            node.paused_until = db.now + stale_write_delay
            self._push(node.paused_until, "writes", node.name)
            node.pending = decided  # type: ignore[attr-defined]
            return
        self._writes(node, decided)

    def _writes(self, node: Node, decided) -> None:
        db = self.db
        for p in decided.release:
            if p in node.held:
                db.release(p, node.name, node.held.pop(p))
                node.held_since.pop(p, None)
        for p in decided.renew:
            if p in node.held and not db.renew(p, node.name, node.held[p]):
                node.held.pop(p)
                node.held_since.pop(p, None)
        for p in decided.take:
            epoch = db.acquire(p, node.name)
            if epoch is not None:
                if p not in node.held:
                    node.held_since[p] = db.now
                node.held[p] = epoch
        for p, epoch in list(node.held.items()):
            if not db.record(p, node.name, epoch):
                node.held.pop(p)
                node.held_since.pop(p, None)

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> None:
        led_since_gap: dict[int, float | None] = dict.fromkeys(range(self.partitions), 0.0)
        self.worst_gap = 0.0
        last_check = 0.0
        while self.queue:
            at, _, kind, name = heapq.heappop(self.queue)
            if at > DURATION:
                break
            # Leadership gaps, sampled between events (every lease's state is piecewise constant
            # between database writes, and writes happen only at events).
            self._check_led(last_check, at, led_since_gap)
            last_check = at
            self.db.now = at
            node = self.nodes.get(name)
            if node is None or not node.up:
                continue
            if kind == "round":
                if at < node.paused_until:
                    self._push(node.paused_until, "round", name)
                    continue
                self._round(node)
                self._push(at + POLL + self.rng.uniform(-0.05, 0.05), "round", name)
            elif kind == "writes":
                self._writes(node, node.pending)  # type: ignore[attr-defined]
            elif kind == "crash":
                node.up = False
                back = at + self.rng.uniform(1, 40)
                generation = int(name.split(".")[1]) + 1
                if back < DURATION - QUIET:
                    self._start(f"{name.split('.')[0]}.{generation}", back)
                else:
                    self._start(f"{name.split('.')[0]}.{generation}", DURATION - QUIET)
            elif kind == "pause":
                node.paused_until = at + self.rng.uniform(1, 2.5 * TTL)
            elif kind == "stale":
                self._round(node, stale_write_delay=self.rng.uniform(TTL, 2.5 * TTL))
            elif kind == "clock":
                # The node's wall clock steps; it decides on the database's time, read in the
                # same query as the leases, so nothing it decides may depend on this.
                node.clock_offset += self.rng.uniform(-30, 30)

    def _check_led(self, start: float, end: float, since: dict[int, float | None]) -> None:
        # A partition counts as unled from its lease's expiry; the clock for the bound only
        # runs while some node is up and not paused (nobody could lead otherwise).
        anyone = any(
            n.up and n.started <= start and n.paused_until <= start for n in self.nodes.values()
        )
        for p, lease in self.db.leases.items():
            led = lease.owner is not None and lease.valid_until > start
            if led or not anyone:
                since[p] = None
                continue
            began = since[p]
            if began is None:
                began = since[p] = max(lease.valid_until, start)
            self.worst_gap = max(self.worst_gap, end - began)


def check(seed: int) -> Simulation:
    sim = Simulation(seed)
    sim.run()
    db = sim.db
    # 1. One run per slot, with no unique constraint to hide a second.
    doubled = {key: n for key, n in db.runs.items() if n > 1}
    assert not doubled, (seed, sorted(doubled)[:5])
    # 2. No lost slot: everything due before the end, less the takeover bound, is recorded.
    horizon = DURATION - LEADERLESS_BOUND - POLL
    for job, period in db.jobs.items():
        missing = [
            k * period
            for k in range(1, int(horizon // period) + 1)
            if (job, k * period) not in db.runs
        ]
        assert not missing, (seed, job, missing[:5])
    # 3. Every partition led within the bound whenever someone could lead it.
    assert sim.worst_gap <= LEADERLESS_BOUND, (seed, sim.worst_gap)
    # 4. Balance once quiet.
    live = sorted(n.name for n in sim.nodes.values() if n.up)
    owners = [lease.owner for lease in db.leases.values()]
    assert all(owner in live for owner in owners), (seed, owners, live)
    counts = [owners.count(name) for name in live]
    low, high = sim.partitions // len(live), math.ceil(sim.partitions / len(live))
    assert all(low <= c <= high for c in counts), (seed, dict(zip(live, counts, strict=True)))
    for name in live:  # and it is the assignment every node computes
        expected = preferred(name, live, sim.partitions)
        assert sorted(p for p, o in enumerate(owners) if o == name) == expected, seed
    # 5. No flapping once settled: the tail of the quiet part sees no change of owner. The last
    # node restarts when the quiet part begins; it is stable SETTLE later, and a partition taken
    # just before that moves on to it no sooner than SETTLE after it was taken.
    settled = DURATION - QUIET + 2 * SETTLE + MEMBER_TIMEOUT + 3 * POLL
    late = [change for change in db.owner_changes if change[0] > settled]
    assert not late, (seed, late[:5])
    return sim


def test_a_job_maps_to_one_stable_partition_and_jobs_spread_evenly():
    """The same partition in every process whatever its hash seed (not Python's hash())."""
    code = (
        "from tests.unit.partitions import partition_of, weight\n"
        "print([partition_of(j, 16) for j in range(100)], weight('node-a', 3))\n"
    )
    outputs = printed_in_processes(code)
    here = f"{[partition_of(j, 16) for j in range(100)]} {weight('node-a', 3)}\n"
    assert outputs == {here}
    counts = [0] * 16
    for job in range(16_000):
        counts[partition_of(job, 16)] += 1
    assert min(counts) > 850
    assert max(counts) < 1150
    with pytest.raises(ValueError, match="at least one partition"):
        partition_of(1, 0)


def test_every_node_computes_the_same_balanced_assignment():
    nodes = [f"node-{i}" for i in range(5)]
    for partitions in (1, 3, 8, 17, 64):
        shares = {n: preferred(n, nodes, partitions) for n in nodes}
        every = sorted(p for share in shares.values() for p in share)
        assert every == list(range(partitions))
        assert max(len(s) for s in shares.values()) <= math.ceil(partitions / 5)
        # A node leaving moves only what it held plus what the new quotas need.
        rest = nodes[:-1]
        after = {n: preferred(n, rest, partitions) for n in rest}
        moved = sum(len(set(after[n]) - set(shares[n])) for n in rest)
        assert moved <= len(shares[nodes[-1]]) + len(rest), (partitions, moved)


CHUNKS = 4


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_thousands_of_seeded_schedules_keep_every_guarantee(chunk):
    """Crashes, pauses past the TTL (also between a read and its writes) and clock steps;
    PARTITION_SIM_SEEDS schedules in all (1,000 by default), in CHUNKS tests."""
    seeds = range(chunk, SEEDS, CHUNKS)
    changes = 0
    for seed in seeds:
        sim = check(seed)
        changes += len(sim.db.owner_changes)
    assert changes > len(seeds)  # the schedules did move leadership around
