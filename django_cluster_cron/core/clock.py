"""A host clock corrected to a reference clock (the database server's), and its skew state.

Pure: the caller passes every reading. :class:`OffsetClock` keeps the host's offset from the
reference, estimated from round trips that returned the reference time, and answers "now" in
reference time as host time minus that offset. :meth:`OffsetClock.observe` also says when the
offset crosses the warning bound, so the caller logs once per change, not once per tick.

A round trip says the reference instant lies between the host readings before and after it: the
offset is the midpoint's, within half the round trip either way. A round trip that stalled (a
slow query, a loaded host) says little, so the clock keeps the narrowest of its last few
estimates that still agree with the newest one (their intervals overlap). An estimate the newest
contradicts dates from before a step of either clock and is dropped, so a step is taken at once.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

ZERO = timedelta(0)
# How many recent estimates the clock chooses among (one per round trip).
ESTIMATES_KEPT = 8


class SkewChange(enum.Enum):
    SKEWED = "skewed"  # the offset went past the bound, or moved by more than it while past
    SYNCED = "synced"  # back within half the bound


@dataclass
class OffsetClock:
    """``host`` reads the host's clock (aware); ``warn_after`` is the skew worth reporting.

    ``offset`` is host minus reference: positive when the host runs ahead.
    """

    host: Callable[[], datetime]
    warn_after: timedelta
    offset: timedelta = ZERO
    measured: bool = False
    _reported: timedelta | None = field(default=None, repr=False)
    # Recent estimates: (offset, half the round trip), oldest first.
    _estimates: deque[tuple[timedelta, timedelta]] = field(
        default_factory=lambda: deque(maxlen=ESTIMATES_KEPT), repr=False
    )

    def __call__(self) -> datetime:
        """The reference clock's current time, as this host best knows it."""
        return self.host() - self.offset

    @property
    def skewed(self) -> bool:
        return self._reported is not None

    def observe(self, reference: datetime, sent: datetime, received: datetime) -> SkewChange | None:
        """Take the reference time a round trip returned; ``sent``/``received`` are host
        readings just before and after it. Returns a change of skew state, if any."""
        self.offset = self._estimate(sent + (received - sent) / 2 - reference, received - sent)
        self.measured = True
        off = abs(self.offset)
        if off > self.warn_after:
            if self._reported is None or abs(self.offset - self._reported) > self.warn_after:
                self._reported = self.offset
                return SkewChange.SKEWED
        elif self._reported is not None and off <= self.warn_after / 2:
            self._reported = None
            return SkewChange.SYNCED
        return None

    def _estimate(self, offset: timedelta, round_trip: timedelta) -> timedelta:
        """Keep this round trip's estimate; the narrowest of those that agree with it."""
        width = max(round_trip, ZERO) / 2
        agreeing = [(o, w) for o, w in self._estimates if abs(o - offset) <= w + width]
        self._estimates.clear()
        self._estimates.extend([*agreeing, (offset, width)])
        # The narrowest; among equals the newest.
        return min(reversed(self._estimates), key=lambda estimate: estimate[1])[0]


def format_offset(offset: timedelta) -> str:
    """``+30.012s`` / ``-0.250s``: host minus reference, in seconds."""
    seconds = offset.total_seconds()
    return f"{seconds:+.3f}s"
