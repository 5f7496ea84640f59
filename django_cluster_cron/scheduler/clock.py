"""The scheduler's clock: the database's, learnt as an offset from this host's.

"Now" is the host clock corrected by the offset the idle query measures (the pure
:class:`~django_cluster_cron.core.clock.OffsetClock`), so a host whose own clock is off still
decides what is due as the database does. The offset is logged once per change past
``CLOCK_SKEW_WARNING`` and exported as a metric; a standby measures it too, so it knows before it
leads and the cluster page shows it. Tests pass a plain callable to drive time themselves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import DatabaseError

from ..core.clock import OffsetClock, SkewChange, format_offset
from ..dbtime import database_now
from ..ops import metrics

logger = logging.getLogger("django_cluster_cron.scheduler")

# A standby reads the database's clock this often (a leader does in every idle tick), so that it
# knows its offset before it leads and the cluster page shows it.
STANDBY_CLOCK_CHECK = 30.0


class ClockWatch:
    def __init__(self, clock: Callable[[], datetime], node_id: str) -> None:
        self.clock = clock
        self.node_id = node_id
        self._checked_at = 0.0

    @property
    def offset(self) -> timedelta | None:
        """This host's clock minus the database's, once measured (None before, or for a test
        clock)."""
        if isinstance(self.clock, OffsetClock) and self.clock.measured:
            return self.clock.offset
        return None

    @property
    def skewed(self) -> bool:
        return bool(getattr(self.clock, "skewed", False))

    def host_now(self) -> datetime:
        if isinstance(self.clock, OffsetClock):
            return self.clock.host()
        return self.clock()

    def observe(self, db_now: datetime | None, sent: datetime) -> None:
        """Learn the offset from a database time read between ``sent`` and now; log a change."""
        if db_now is None or not isinstance(self.clock, OffsetClock):
            return
        change = self.clock.observe(db_now, sent, self.host_now())
        metrics.get().clock_offset.labels(node=self.node_id).set(self.clock.offset.total_seconds())
        self._checked_at = time.monotonic()
        offset = format_offset(self.clock.offset)
        if change is SkewChange.SKEWED:
            logger.warning(
                "clock.skew node=%s offset=%s (this host's clock minus the database's; slots "
                "are decided by the database's clock)",
                self.node_id,
                offset,
            )
        elif change is SkewChange.SYNCED:
            logger.info("clock.synced node=%s offset=%s", self.node_id, offset)

    def check_as_standby(self, on_database_error: Callable[[], object]) -> None:
        if time.monotonic() - self._checked_at < STANDBY_CLOCK_CHECK:
            return
        if not isinstance(self.clock, OffsetClock):
            return
        sent = self.host_now()
        try:
            db_now = database_now()
        except DatabaseError as exc:  # the leader's path reports the database; try later
            logger.debug("clock.check_failed node=%s error=%s", self.node_id, exc)
            on_database_error()
            self._checked_at = time.monotonic()
            return
        self.observe(db_now, sent)
