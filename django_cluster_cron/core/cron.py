"""Fire times of a cron expression in a time zone: iteration and the DST rules
(docs/how-to/time-zones.md).

The expression's meaning — the exact set of values per field — comes from :mod:`.dialect`; this
module walks the calendar over those sets and turns wall-clock times in the job's zone into
instants:

* A job whose minute and hour fields are both fixed (neither starts with ``*``) is a wall-clock
  job: a wall time inside a spring-forward gap fires once at the first instant after the gap; a
  wall time repeated by a fall-back fires once, at its first occurrence. A seconds field does not
  change this.
* Any other job (``*`` or ``*/n`` in the minute or hour field) follows real time: it fires at
  every instant whose local reading matches, so it runs in both passes of a repeated hour and not
  at wall times that never happen.

How it stays fast: the calendar walk yields only the hours that hold fire times; for each one,
four offset look-ups tell whether the zone's clock runs regularly through that whole hour (no
transition in it — transitions in the tz database are days apart). Inside a regular hour a fire
time is its wall time minus one fixed offset. Only hours that touch a transition take the careful
path, wall time by wall time.
"""

from __future__ import annotations

import calendar
import functools
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo

from .dialect import ALIASES, MAX_EXPRESSION_LENGTH, CronFields
from .errors import ScheduleError
from .kinds import take
from .parsing import normalize, parse, seconds_first_habit
from .timezones import (
    UTC,
    gap_end,
    get_zone,
    is_ambiguous,
    is_fixed_offset,
    is_imaginary,
    to_instant,
    to_wall,
)

__all__ = [
    "ALIASES",
    "MAX_EXPRESSION_LENGTH",
    "CronSchedule",
    "normalize",
    "seconds_first_habit",
]

HOUR = timedelta(hours=1)
# Fire times are produced up to the end of this year (the largest year a datetime can hold,
# less one, so that converting between zones near the end cannot overflow).
LAST_YEAR = 9998
# A fire time's wall time can sit at most this far before the instant ``after`` reads as (a
# transition moved the clock back by up to a day: Pacific/Apia, 2011, went the other way).
REWIND_HOURS = 48


@functools.lru_cache(maxsize=4096)
def _month_shape(year: int, month: int) -> tuple[int, int]:
    """(weekday of the 1st counted from Sunday = 0, number of days)."""
    monday_first, length = calendar.monthrange(year, month)
    return (monday_first + 1) % 7, length


@dataclass(frozen=True)
class CronSchedule:
    """A validated cron expression bound to a time zone; iterates fire times as UTC instants."""

    expression: str
    timezone: str
    fields: tuple[str, ...] = field(repr=False)
    spec: CronFields = field(repr=False, compare=False)
    zone: tzinfo = field(repr=False, compare=False)
    wall_clock: bool = field(repr=False)
    _in_hour: tuple[timedelta, ...] = field(repr=False, compare=False)
    _in_hour_seconds: tuple[int, ...] = field(repr=False, compare=False)
    kind = "cron"

    @classmethod
    def parse(cls, expression: str, timezone: str) -> CronSchedule:
        """Validate both inputs; raise ``ScheduleError`` (a ``ValueError``) if either is bad."""
        spec = parse(expression)
        fields = normalize(expression)
        zone = get_zone(timezone)
        in_hour = spec.seconds_in_hour()
        return cls(
            expression=" ".join(expression.split()),
            timezone=timezone,
            fields=fields,
            spec=spec,
            zone=zone,
            wall_clock=not (fields[0].startswith("*") or fields[1].startswith("*")),
            _in_hour=tuple(timedelta(seconds=s) for s in in_hour),
            _in_hour_seconds=in_hour,
        )

    # -- iteration -------------------------------------------------------------------------

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Yield fire times strictly after the aware instant ``after``, in order, forever."""
        if after.tzinfo is None or after.utcoffset() is None:
            raise ScheduleError("after", f"'after' must be timezone-aware, got naive {after!r}.")
        after = after.astimezone(UTC)
        if after.year >= LAST_YEAR:
            return
        last = after
        for instant in self._instants(after):
            if instant > last:
                last = instant
                yield instant

    def fire_times(self, after: datetime, limit: int) -> list[datetime]:
        return take(self.iter_after(after), limit)

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire time after ``after`` (``None`` only if the calendar runs out)."""
        return next(self.iter_after(after), None)

    def last_fire(self) -> datetime | None:
        """Cron schedules never end on their own (``end_at`` ends them)."""
        return None

    def dst_note(self, instant: datetime) -> str | None:
        """Explain a fire time that a DST change moved or that falls in a repeated hour.

        ``None`` for an ordinary fire time. Used by the admin's preview of upcoming runs.
        """
        if is_fixed_offset(self.zone):
            return None
        wall = to_wall(instant, self.zone)
        earlier = to_wall(instant - timedelta(seconds=1), self.zone)
        if wall - earlier > timedelta(seconds=1) and not self.spec.matches(wall):
            return f"moved: the clock skipped from {earlier:%H:%M:%S} to {wall:%H:%M} (DST starts)"
        if is_ambiguous(wall, self.zone):
            if self.wall_clock:
                return "this wall time happens twice (DST ends); the job runs at the first only"
            local = instant.astimezone(self.zone)
            which = "second" if to_instant(wall, self.zone, fold=1) == instant else "first"
            return f"{which} pass of a repeated hour (DST ends, offset {local:%z})"
        return None

    def _instants(self, after: datetime) -> Iterator[datetime]:
        """Candidate instants in order (possibly repeating one, or a few at or before ``after``;
        :meth:`iter_after` drops those)."""
        zone = self.zone
        in_hour = self._in_hour
        start = to_wall(after, zone).replace(microsecond=0)
        if is_fixed_offset(zone):
            for hour, first in self._hours_from(start):
                base = hour.replace(tzinfo=UTC)
                for delta in in_hour[first:]:
                    yield base + delta
            return
        top = start.replace(minute=0, second=0)
        if self._regular_offset(top) is None:
            # ``after`` reads as a wall time near a transition: an earlier wall time may map to
            # a later instant (a repeated hour's second pass), so walk the irregular stretch
            # from its beginning.
            for _ in range(REWIND_HOURS):
                if self._regular_offset(top - HOUR) is not None:
                    break
                top -= HOUR
            start = top
        # Instants of irregular hours, released in order once a regular hour follows them.
        pending: list[datetime] = []
        for hour, first in self._hours_from(start):
            offset = self._regular_offset(hour)
            if offset is None:
                for delta in in_hour[first:]:
                    pending.extend(self._instants_of(hour + delta))
                continue
            if pending:
                pending.sort()
                yield from pending
                pending.clear()
            base = hour.replace(tzinfo=UTC) - offset
            for delta in in_hour[first:]:
                yield base + delta
        pending.sort()
        yield from pending

    def _hours_from(self, start: datetime) -> Iterator[tuple[datetime, int]]:
        """Each wall-clock hour from ``start``'s on that holds fire times, in order, with the
        index into the hour's offsets of the first one not before ``start`` (0 after the
        first hour)."""
        spec = self.spec
        months, hours = spec.months, spec.hours
        first = bisect_left(self._in_hour_seconds, start.minute * 60 + start.second)
        if first == len(self._in_hour_seconds):
            start = start.replace(minute=0, second=0) + HOUR
            first = 0
        year, month, day, hour = start.year, start.month, start.day, start.hour
        initial = (year, month, day, hour)
        while year <= LAST_YEAR:
            for m in months[bisect_left(months, month) :]:
                if m != month:
                    day, hour = 1, 0
                first_weekday, length = _month_shape(year, m)
                days = spec.days_in(first_weekday, length)
                for d in days[bisect_left(days, day) :]:
                    if d != day:
                        hour = 0
                    for h in hours[bisect_left(hours, hour) :]:
                        if first and (year, m, d, h) != initial:
                            first = 0
                        yield datetime(year, m, d, h), first
                        first = 0
            year, month, day, hour = year + 1, 1, 1, 0

    def _regular_offset(self, hour: datetime) -> timedelta | None:
        """The zone's UTC offset if its clock shows every wall time of the hour starting at
        ``hour`` exactly once, all at that offset; else None.

        True when both ends of the hour are unambiguous and share an offset: a transition inside
        would change the offset, and two cancelling each other within an hour do not occur (the
        closest transitions in the tz database are days apart; tests check the installed one).
        """
        zone = self.zone
        start = hour.replace(tzinfo=zone)
        offset = start.utcoffset()
        if offset != start.replace(fold=1).utcoffset():
            return None
        end = (hour + HOUR).replace(tzinfo=zone)
        if end.utcoffset() != offset or end.replace(fold=1).utcoffset() != offset:
            return None
        return offset

    def _instants_of(self, wall: datetime) -> list[datetime]:
        """The instants a wall time near a transition fires at, per the DST rules (see the module
        doc)."""
        zone = self.zone
        if is_imaginary(wall, zone):
            return [gap_end(wall, zone)] if self.wall_clock else []
        if is_ambiguous(wall, zone) and not self.wall_clock:
            return [to_instant(wall, zone, fold=0), to_instant(wall, zone, fold=1)]
        return [to_instant(wall, zone, fold=0)]
