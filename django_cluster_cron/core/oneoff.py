"""One-off schedules: ``@at 2026-12-24T18:00`` fires once.

The date and time is either a wall time in the job's zone (``@at 2026-12-24T18:00``) or an
instant with its own offset (``@at 2026-12-24T18:00+01:00``, ``@at 2026-12-24T17:00Z``). A wall
time follows the rules of fixed-time cron jobs: one that a spring-forward skips fires at the
first instant after the gap, one that a fall-back repeats fires at its first occurrence. Seconds
are optional; fractions of a second are refused (slots are whole seconds).

After its instant the schedule has no more fire times; the job that carries it reads as
finished, like a job past its ``end_at``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo

from .errors import ScheduleError
from .kinds import take
from .timezones import UTC, gap_end, get_zone, is_ambiguous, is_imaginary, to_instant, to_wall

__all__ = ["OneOffSchedule"]

PREFIX = "@at"
_WHEN = re.compile(
    r"^(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[t ](?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})"
    r"(?::(?P<second>[0-9]{2}))?(?P<offset>z|[+-][0-9]{2}:?[0-9]{2})?$"
)


def _fail(message: str) -> ScheduleError:
    return ScheduleError("cron", message)


def _offset(text: str) -> tzinfo:
    if text == "z":
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:])
    if hours > 23 or minutes > 59:
        raise _fail(f"'{text.upper()}' is not a UTC offset (at most ±23:59).")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def _parse_when(text: str) -> tuple[datetime, tzinfo | None]:
    """The naive date and time written, and its explicit offset if it has one."""
    written = text.strip()
    match = _WHEN.match(written.lower())
    if match is None:
        raise _fail(
            f"'@at {written}' is not a date and time: write 'YYYY-MM-DDTHH:MM' (seconds "
            "optional), a wall time in the job's time zone, or add an offset such as '+01:00' "
            "or 'Z', e.g. '@at 2026-12-24T18:00'."
        )
    parts = match.groupdict()
    try:
        year, month, day = (int(x) for x in parts["date"].split("-"))
        wall = datetime(
            year, month, day, int(parts["hour"]), int(parts["minute"]), int(parts["second"] or 0)
        )
    except ValueError as exc:
        raise _fail(f"'@at {written}': {exc} (no such date or time).") from None
    if not 1970 <= year <= 9997:
        raise _fail(f"'@at {written}': the year must be between 1970 and 9997.")
    return wall, (_offset(parts["offset"]) if parts["offset"] else None)


@dataclass(frozen=True)
class OneOffSchedule:
    """``@at <date and time>``: a single fire time."""

    expression: str
    timezone: str
    instant: datetime
    wall: datetime | None  # the wall time written in the job's zone; None with an explicit offset
    zone: tzinfo = field(repr=False, compare=False)
    kind = "one-off"

    @classmethod
    def parse(cls, expression: str, timezone: str) -> OneOffSchedule:
        text = " ".join(expression.split())
        if not text.lower().startswith(PREFIX + " ") and text.lower() != PREFIX:
            raise _fail(f"{expression!r} is not a one-off: it must start with '@at'.")
        written = text[len(PREFIX) :].strip()
        if not written:
            raise _fail("'@at' needs a date and time after it, e.g. '@at 2026-12-24T18:00'.")
        zone = get_zone(timezone)
        moment, offset = _parse_when(written)
        if offset is not None:
            instant = moment.replace(tzinfo=offset).astimezone(UTC)
            canonical = moment.replace(tzinfo=offset).isoformat()
            if offset is UTC:
                canonical = canonical.replace("+00:00", "Z")
            wall = None
        else:
            instant = cls._wall_instant(moment, zone)
            canonical = moment.isoformat()
            wall = moment
        return cls(
            expression=f"{PREFIX} {canonical}",
            timezone=timezone,
            instant=instant,
            wall=wall,
            zone=zone,
        )

    @staticmethod
    def _wall_instant(wall: datetime, zone: tzinfo) -> datetime:
        if is_imaginary(wall, zone):
            return gap_end(wall, zone)
        return to_instant(wall, zone, fold=0)

    @property
    def wall_clock(self) -> bool:
        return self.wall is not None

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        if after.tzinfo is None or after.utcoffset() is None:
            raise ScheduleError("after", f"'after' must be timezone-aware, got naive {after!r}.")
        if self.instant > after:
            yield self.instant

    def fire_times(self, after: datetime, limit: int) -> list[datetime]:
        return take(self.iter_after(after), limit)

    def next_after(self, after: datetime) -> datetime | None:
        return next(self.iter_after(after), None)

    def last_fire(self) -> datetime | None:
        return self.instant

    def dst_note(self, instant: datetime) -> str | None:
        if self.wall is None or instant != self.instant:
            return None
        if is_imaginary(self.wall, self.zone):
            shown = to_wall(instant, self.zone)
            return (
                f"moved: the clock skips {self.wall:%H:%M} on that day (DST starts); it runs "
                f"at {shown:%H:%M}"
            )
        if is_ambiguous(self.wall, self.zone):
            return "this wall time happens twice (DST ends); the job runs at the first only"
        return None
