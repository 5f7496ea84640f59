"""Noticing that the database went back: the slots whose fate the ledger lost.

On one server the leader row only moves forward: its epoch grows with each term, and its count
of ``writes`` with each write a leader makes (a counter, not a time: clocks may step back). Every
node sees the row as it goes (the leader in its idle query, a standby as it tries the lease) and
keeps the furthest it saw, with which server it saw it on (:class:`Horizon`). A node that takes
the lease and finds the row *behind* what it saw is looking at a database that lost writes it
had acknowledged: an asynchronous standby promoted before they reached it, or a restore from a
backup (:meth:`Horizon.judge`).

What was lost is the ledger of a few seconds: runs recorded, sent, even finished, whose rows are
gone or went back. A slot of those seconds may have run, and the new leader cannot know; the
*uncertain window* (:meth:`WentBack.window`) bounds them: from the last write the server kept,
back by the lease TTL and the look-ahead (a run recorded before it may have been sent or finished
after it), to the last write any node saw, forward by the same (the old leader may have gone on
until its lease ran out, recording that far ahead), and never past now.

An epoch that went back while the count of writes did not is an edit of the epoch alone: nothing of
the ledger was lost. Either way a new term takes an epoch above every one seen
(:attr:`Horizon.epoch_floor`), so no number is issued twice by nodes that saw it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class WentBack:
    """The leader row, as a new term found it, is behind what this process saw."""

    kept_epoch: int
    kept_writes: int  # how many writes the row counts, as the server kept it
    kept_at: datetime | None  # and when the last of them was made
    seen_epoch: int
    seen_writes: int  # the most writes a node saw counted
    seen_at: datetime | None
    seen_on: str  # the server it was seen on ("" when unknown)
    server: str  # the server answering now ("" when unknown)

    @property
    def writes_lost(self) -> bool:
        """Whether writes of the ledger were lost (not only the epoch edited)."""
        return self.kept_writes < self.seen_writes

    @property
    def server_changed(self) -> bool:
        """Whether another server (or another life of it: a new timeline) answers now: a
        failover or a restore, rather than an edit on the same server."""
        return bool(self.seen_on and self.server and self.seen_on != self.server)

    def cause(self) -> str:
        if not self.writes_lost:
            return (
                "the leader row's epoch is below one this node saw (edited by hand, or a term "
                "issued by a server that lost it since)"
            )
        if self.server_changed:
            return (
                "the database lost writes it had acknowledged: another server answers (a "
                "failover to a standby that had not received them, or a restore)"
            )
        return "the database lost writes: a restore from a backup, or the ledger edited by hand"

    def window(
        self, *, ttl: timedelta, lookahead: timedelta, now: datetime
    ) -> tuple[datetime, datetime]:
        """The slots whose fate cannot be known: ``(start, end]`` (see the module doc)."""
        margin = ttl + lookahead
        last_seen = self.seen_at or now
        start = min(self.kept_at or last_seen, last_seen) - margin
        return start, min(last_seen + margin, now)


@dataclass
class Horizon:
    """The furthest this process saw the leader row go, and on which server."""

    epoch: int = 0
    writes: int = 0
    last_write_at: datetime | None = None
    server: str = ""

    def observe(self, epoch: int, writes: int, last_write_at: datetime | None, server: str) -> None:
        if writes > self.writes:
            self.writes, self.last_write_at = writes, last_write_at
            self.server = server or self.server
        self.epoch = max(self.epoch, epoch)

    @property
    def epoch_floor(self) -> int:
        """The lowest epoch a new term may take: above every one this process saw."""
        return self.epoch + 1

    def judge(
        self, kept_epoch: int, kept_writes: int, kept_at: datetime | None, server: str
    ) -> WentBack | None:
        """The leader row a new term found (its epoch before the term's own bump, its write
        count and last write) against what was seen: what went back, or None."""
        went = WentBack(
            kept_epoch=kept_epoch,
            kept_writes=kept_writes,
            kept_at=kept_at,
            seen_epoch=self.epoch,
            seen_writes=self.writes,
            seen_at=self.last_write_at,
            seen_on=self.server,
            server=server,
        )
        if went.writes_lost or kept_epoch < self.epoch:
            return went
        return None

    def restart(self, epoch: int, writes: int, server: str) -> None:
        """Take the row as the server answering has it for the truth from here on (once judged,
        or as a term begins: the term writes over it)."""
        self.epoch = max(self.epoch, epoch)
        self.writes, self.last_write_at, self.server = writes, None, server
