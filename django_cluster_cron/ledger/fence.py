"""The fence: every write a leader makes counts only while its leadership term is current.

A term is an *epoch* (a number on the ``leader`` row of ``SchedulerLease`` that only grows) and
the owner *token* of the lease that won it. :meth:`Fence.transaction` opens a transaction whose
first statement is ``UPDATE scheduler_lease SET last_write_at = now WHERE name = 'leader' AND
epoch = <mine> AND token = <mine>``. If a newer leader has taken over, no row matches and
:class:`FencedOut` is raised before anything is written. If the row matches, the statement holds
the row's lock until commit (PostgreSQL and InnoDB row lock; SQLite's database write lock), so a
newer leader's epoch bump waits for this transaction and every later one of the old leader
fails. The token makes the fence hold even if the epoch column is edited backwards by hand: an
old leader's epoch may come round again, its token never does.

Together with the unique constraint on (job, slot) this is what makes "one run per slot" hold
when two processes both believe they lead; the lease only keeps that situation rare.

A term begins with :meth:`Fence.claim` (the scheduler bumps the epoch after taking a Redis or
in-memory lease) or :meth:`Fence.join` (the database lease's acquiring UPDATE bumped it already).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import NamedTuple

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest

from ..dbtime import DbNow
from ..leases.base import LEADER
from ..models import SchedulerLease


class FencedOut(Exception):
    """This node's epoch is no longer current: a newer leader has taken over."""

    def __init__(self, epoch: int) -> None:
        super().__init__(f"epoch {epoch} is no longer the current leader epoch")
        self.epoch = epoch


class Kept(NamedTuple):
    """The leader row as a new term found it (before the term's own write): its epoch, its count
    of writes and when the last one was made."""

    epoch: int
    writes: int
    last_write_at: datetime | None


class Fence:
    """One leadership term: its ``epoch`` and, once taken through a lease, the lease's token
    (and the leader row as the term found it, ``kept``)."""

    def __init__(self, epoch: int, token: str | None = None, kept: Kept | None = None) -> None:
        self.epoch = epoch
        self.token = token
        self.kept = kept

    def __repr__(self) -> str:
        return f"<Fence epoch={self.epoch} token={self.token!r}>"

    @classmethod
    def claim(cls, node_id: str, token: str, floor: int = 0) -> Fence:
        """A new term for ``node_id``: increment the epoch (to at least ``floor``) and write the
        holder (the lease backend did not: Redis, memory)."""
        with transaction.atomic():
            SchedulerLease.objects.get_or_create(name=LEADER)
            row = SchedulerLease.objects.filter(name=LEADER)
            kept = Kept(*row.values_list("epoch", "writes", "last_write_at").get())
            row.update(
                epoch=Greatest(F("epoch") + 1, Value(floor)),
                writes=F("writes") + 1,
                last_write_at=DbNow(),
                holder=node_id,
                token=token,
                acquired_at=DbNow(),
                handed_over_at=None,
            )
            return cls(int(row.values_list("epoch", flat=True).get()), token, kept)

    def hand_over(self) -> bool:
        """Give this term up in the database (Redis lease): its leader can no longer reach the
        lease to release it, so a standby frees it (:meth:`handed_over`). Whether the row still
        named this term."""
        mine = {"name": LEADER, "epoch": self.epoch, "token": self.token or ""}
        return bool(SchedulerLease.objects.filter(**mine).update(handed_over_at=DbNow()))

    @staticmethod
    def handed_over(
        seen: Callable[[int, int, datetime | None], object] | None = None,
    ) -> str | None:
        """The lease token of a term its leader gave up with :meth:`hand_over`, if there is one
        that no newer term replaced. The row's epoch and last write go to ``seen``: a standby
        with the Redis lease reads the leader row only here."""
        row = (
            SchedulerLease.objects.filter(name=LEADER)
            .values_list("token", "handed_over_at", "epoch", "writes", "last_write_at")
            .first()
        )
        if row is None:
            return None
        token, handed_over_at, epoch, writes, last_write_at = row
        if seen is not None:
            seen(int(epoch), int(writes), last_write_at)
        return str(token) if token and handed_over_at is not None else None

    @classmethod
    def join(cls, token: str, floor: int = 0) -> Fence | None:
        """The term the database lease's acquiring UPDATE gave ``token`` (None if the row no
        longer holds it), its epoch raised to ``floor`` if below. The row is found by writing
        to it, on the connection the leader's writes will use: a connection left on a server that
        no longer takes writes (a primary demoted after a failover, still answering reads of what
        it held) fails here, instead of reading there that the lease is not ours while the
        lease's own connection took it on the new primary."""
        with transaction.atomic():
            mine = SchedulerLease.objects.filter(name=LEADER, token=token)
            if not mine.update(holder=F("holder")):
                return None
            kept = Kept(*mine.values_list("epoch", "writes", "last_write_at").get())
            mine.update(
                last_write_at=DbNow(),
                writes=F("writes") + 1,
                epoch=Greatest(F("epoch"), Value(floor)),
            )
            epoch = mine.values_list("epoch", flat=True).get()
        return cls(int(epoch), token, kept)

    @contextmanager
    def transaction(self, now: datetime) -> Iterator[None]:
        """A transaction that only commits writes of the current term (see the module doc)."""
        mine: dict[str, object] = {"name": LEADER, "epoch": self.epoch}
        if self.token is not None:
            mine["token"] = self.token
        with transaction.atomic():
            fenced = SchedulerLease.objects.filter(**mine)
            if not fenced.update(last_write_at=now, writes=F("writes") + 1):
                raise FencedOut(self.epoch)
            yield
