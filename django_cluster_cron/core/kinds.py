"""What every kind of schedule offers the rest of the app.

A schedule is cron (:mod:`.cron`), an interval (:mod:`.interval`), a one-off date
(:mod:`.oneoff`) or a solar event (:mod:`.solar`), optionally with exclusions
(:mod:`.exclusions`). The scheduler, the catch-up plan, the previews and the metrics only ever
ask the questions of :class:`Schedule`, so a new kind needs nothing but this interface.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, tzinfo
from typing import Protocol

from .errors import ScheduleError
from .timezones import UTC

__all__ = ["LAST_INSTANT", "Schedule", "take"]

# No schedule yields an instant past this one (a datetime holds year 9999; a year of margin
# keeps conversions between zones from overflowing).
LAST_INSTANT = datetime(9998, 12, 31, tzinfo=UTC)


class Schedule(Protocol):
    """A validated schedule bound to a time zone."""

    @property
    def expression(self) -> str: ...  # the canonical spelling, as stored

    @property
    def timezone(self) -> str: ...

    @property
    def zone(self) -> tzinfo: ...

    @property
    def kind(self) -> str: ...  # "cron", "interval", "one-off" or "solar"

    @property
    def wall_clock(self) -> bool: ...  # fires at wall times (the fixed-time DST rules apply)

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Fire times strictly after the aware instant ``after``, as UTC instants, in order."""
        ...

    def fire_times(self, after: datetime, limit: int) -> list[datetime]: ...

    def next_after(self, after: datetime) -> datetime | None: ...

    def dst_note(self, instant: datetime) -> str | None:
        """Why a DST change moved ``instant`` or what it repeats, for the preview; or None."""
        ...

    def last_fire(self) -> datetime | None:
        """The final fire time of a schedule that ends by itself (a one-off), else None."""
        ...


def take(instants: Iterable[datetime], limit: int) -> list[datetime]:
    """The first ``limit`` of ``instants``, with ``limit`` checked as ``fire_times`` documents."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ScheduleError("limit", f"'limit' must be a whole number >= 0, got {limit!r}.")
    result: list[datetime] = []
    if limit == 0:
        return result
    for instant in instants:
        result.append(instant)
        if len(result) >= limit:
            break
    return result
