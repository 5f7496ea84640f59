"""The leader row watched for a database that went back (a lossy failover, a restore).

A node keeps the furthest it saw the leader row go (its epoch, its write count, its last write:
a :class:`~django_cluster_cron.core.uncertain.Horizon`), from every read of the row: a standby's
look for a handed-over term, the database lease's tries, the leader's idle query. A term that
finds the row behind that, as it begins or while it goes on, logs and counts what went back; if
writes were lost, the leader decides the slots whose fate it cannot know
(:mod:`django_cluster_cron.scheduler.uncertain`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.db import connection

from ..core.uncertain import Horizon, WentBack
from ..dbconn import server_identity
from ..ledger.fence import Fence
from ..ops import metrics

logger = logging.getLogger("django_cluster_cron.scheduler")


class RowWatch:
    """What this node saw of the leader row, and what it makes of a row behind that."""

    def __init__(
        self, *, node_id: str, on_went_back: Callable[[WentBack], object] | None = None
    ) -> None:
        self.node_id = node_id
        self._on_went_back = on_went_back
        # The furthest this node saw the leader row go (its epoch, its last write), to notice a
        # database that went back (see django_cluster_cron.core.uncertain).
        self.horizon = Horizon()

    def seen_in_database(self, epoch: int, writes: int, last_write_at: datetime | None) -> None:
        """The leader row as a standby read it through the ORM's connection (its look for a
        handed-over term)."""
        self.horizon.observe(epoch, writes, last_write_at, server_identity(connection))

    def seen_by_leader(
        self, epoch: int, writes: int, last_write_at: datetime | None, *, term_epoch: int | None
    ) -> WentBack | None:
        """The leader row as this leader's idle query read it (its term: ``term_epoch``). Fewer
        writes than it saw: the database went back under a term that goes on (a failover the
        leader's connections followed, its lease still valid there); what was lost, for the
        caller to decide."""
        server = server_identity(connection)
        if writes >= self.horizon.writes:
            self.horizon.observe(epoch, writes, last_write_at, server)
            return None
        went = self.horizon.judge(epoch, writes, last_write_at, server)
        self.horizon.restart(epoch, writes, server)
        return None if went is None else self._report(went, term_epoch)

    def judge_row(self, fence: Fence) -> None:
        """The leader row as the term ``fence`` found it, against what this node saw: a row
        behind it means the database lost writes (or was edited); the leader decides the slots
        whose fate it cannot know before dispatching anything (``on_went_back``)."""
        if fence.kept is None:
            return
        server = server_identity(connection)
        kept = fence.kept
        went = self.horizon.judge(kept.epoch, kept.writes, kept.last_write_at, server)
        # From here on the row as this server has it is the truth (this term writes over it).
        self.horizon.restart(fence.epoch, kept.writes + 1, server)
        lost = None if went is None else self._report(went, fence.epoch)
        if lost is not None and self._on_went_back is not None:
            self._on_went_back(lost)

    def report_epoch_change(self, row_epoch: int | None, term_epoch: int | None) -> None:
        """The leader row no longer names this term: say what happened when it went back."""
        if row_epoch is not None and term_epoch is not None and row_epoch < term_epoch:
            # Epochs only grow: this row was edited or restored from a backup. The token check
            # keeps any older leader's writes out; this node steps down and takes a new epoch.
            logger.error(
                "lease.epoch_went_back node=%s epoch=%s row_epoch=%s (the leader row was edited "
                "by hand or restored; stepping down)",
                self.node_id,
                term_epoch,
                row_epoch,
            )

    def _report(self, went: WentBack, term_epoch: int | None) -> WentBack | None:
        """Log and count what went back; ``went`` if writes were lost (None: the epoch alone)."""
        logger.error(
            "lease.went_back node=%s epoch=%s kept_epoch=%s seen_epoch=%s kept_writes=%s "
            "seen_writes=%s kept_write=%s seen_write=%s server_changed=%s: %s",
            self.node_id,
            term_epoch,
            went.kept_epoch,
            went.seen_epoch,
            went.kept_writes,
            went.seen_writes,
            _stamp(went.kept_at),
            _stamp(went.seen_at),
            went.server_changed,
            went.cause(),
        )
        cause = "writes_lost" if went.writes_lost else "epoch_edited"
        metrics.get().went_back.labels(cause=cause).inc()
        return went if went.writes_lost else None


def _stamp(at: datetime | None) -> str:
    return "-" if at is None else at.isoformat(timespec="milliseconds")
