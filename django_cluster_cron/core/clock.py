"""A host clock corrected to a reference clock (the database server's), and its skew state.

Pure: the caller passes every reading. :class:`OffsetClock` keeps the host's offset from the
reference, estimated from a round trip that returned the reference time (the reference instant
is taken to be the midpoint of the host readings before and after), and answers "now" in
reference time as host time minus that offset. :meth:`OffsetClock.observe` also says when the
offset crosses the warning bound, so the caller logs once per change, not once per tick.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

ZERO = timedelta(0)


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

    def __call__(self) -> datetime:
        """The reference clock's current time, as this host best knows it."""
        return self.host() - self.offset

    @property
    def skewed(self) -> bool:
        return self._reported is not None

    def observe(self, reference: datetime, sent: datetime, received: datetime) -> SkewChange | None:
        """Take the reference time a round trip returned; ``sent``/``received`` are host
        readings just before and after it. Returns a change of skew state, if any."""
        self.offset = sent + (received - sent) / 2 - reference
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


def format_offset(offset: timedelta) -> str:
    """``+30.012s`` / ``-0.250s``: host minus reference, in seconds."""
    seconds = offset.total_seconds()
    return f"{seconds:+.3f}s"
