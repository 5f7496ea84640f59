"""Interval schedules: ``@every 90s``, ``@every 1h30m``, ``@every 36h``.

An interval counts real elapsed time. Its fire times are ``anchor + k * interval`` for every
whole ``k``, where the anchor is the job's ``start_at`` when it has one and the Unix epoch
(1970-01-01T00:00:00Z) otherwise. Every host computes the same instants without sharing any
state, a restart does not shift the cadence, and DST changes nothing: across a spring-forward
a 2-hour interval still fires every 7,200 seconds, and the local clock readings of its fire times
move by the hour the clock jumped.

Slots are whole seconds: an anchor with a fraction of a second counts from the next whole second.
The arithmetic is on integers, so no float rounding can make two hosts disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo

from .errors import ScheduleError
from .kinds import LAST_INSTANT, take
from .timezones import UTC, get_zone

__all__ = ["EPOCH", "MAX_INTERVAL", "IntervalSchedule", "format_duration", "parse_duration"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PREFIX = "@every"
# A slot a year apart is already a one-off in disguise; ten years bounds the arithmetic and
# catches a unit typed wrong (``@every 3650d`` is accepted, ``@every 100000d`` is refused).
MAX_INTERVAL = timedelta(days=3650)
_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_UNIT_NAMES = {"d": "day", "h": "hour", "m": "minute", "s": "second"}
_PART = re.compile(r"([0-9]+)([a-z]+)")
_US = 1_000_000


def _fail(message: str) -> ScheduleError:
    return ScheduleError("cron", message)


def parse_duration(text: str) -> timedelta:
    """``90s``, ``7m``, ``1h30m``, ``2d12h``: whole units, largest first, each at most once."""
    compact = text.strip().lower()
    if not compact:
        raise _fail(
            "'@every' needs a duration after it, such as '@every 90s', '@every 7m' or "
            "'@every 1h30m' (units: d, h, m, s)."
        )
    if " " in compact or "\t" in compact:
        raise _fail(f"'@every {text.strip()}': write the duration without spaces, e.g. '1h30m'.")
    position, seconds, seen = 0, 0, ""
    for match in _PART.finditer(compact):
        if match.start() != position:
            break
        number, unit = match.groups()
        if unit not in _UNITS:
            raise _fail(
                f"'@every {compact}': unknown unit {unit!r}; use d (days), h (hours), "
                "m (minutes) or s (seconds)."
            )
        if unit in seen:
            raise _fail(f"'@every {compact}': the unit {unit!r} appears twice.")
        if seen and "dhms".index(unit) < "dhms".index(seen[-1]):
            raise _fail(
                f"'@every {compact}': write the units from the largest to the smallest "
                "(d, h, m, s), e.g. '1h30m'."
            )
        seen += unit
        if len(number) > 12:
            raise _fail(f"'@every {compact}': {number}{unit} is too long an interval.")
        seconds += int(number) * _UNITS[unit]
        position = match.end()
    if position != len(compact):
        raise _fail(
            f"'@every {compact}' is not a duration: write whole numbers with units, such as "
            "'90s', '7m', '1h30m' or '36h' (units: d, h, m, s; no fractions)."
        )
    if seconds < 1:
        raise _fail(f"'@every {compact}' is zero: the shortest interval is 1s.")
    if seconds > MAX_INTERVAL.total_seconds():
        raise _fail(
            f"'@every {compact}' is longer than the longest interval, {MAX_INTERVAL.days} days; "
            "for a single run use '@at <date and time>'."
        )
    return timedelta(seconds=seconds)


def _parts(interval: timedelta) -> list[tuple[int, str]]:
    """``(count, unit)`` per non-zero unit, largest first: 5400 s -> [(1, "h"), (30, "m")]."""
    left, parts = int(interval.total_seconds()), []
    for unit, size in _UNITS.items():
        count, left = divmod(left, size)
        if count:
            parts.append((count, unit))
    return parts


def format_duration(interval: timedelta) -> str:
    """The canonical spelling: ``timedelta(seconds=5400)`` -> ``1h30m``."""
    return "".join(f"{count}{unit}" for count, unit in _parts(interval)) or "0s"


def duration_in_words(interval: timedelta) -> str:
    """``1h30m`` -> ``1 hour 30 minutes``."""
    return " ".join(
        f"{count} {_UNIT_NAMES[unit]}{'' if count == 1 else 's'}"
        for count, unit in _parts(interval)
    )


@dataclass(frozen=True)
class IntervalSchedule:
    """``@every <duration>`` from an anchor; iterates fire times as UTC instants."""

    expression: str
    timezone: str
    interval: timedelta
    anchor: datetime
    zone: tzinfo = field(repr=False, compare=False)
    kind = "interval"
    wall_clock = False

    @classmethod
    def parse(
        cls, expression: str, timezone: str, anchor: datetime | None = None
    ) -> IntervalSchedule:
        text = " ".join(expression.split())
        if not text.lower().startswith(PREFIX):
            raise _fail(f"{expression!r} is not an interval: it must start with '@every'.")
        interval = parse_duration(text[len(PREFIX) :])
        if anchor is None:
            anchor = EPOCH
        elif anchor.tzinfo is None or anchor.utcoffset() is None:
            raise ScheduleError("start_at", f"the anchor must be timezone-aware, got {anchor!r}.")
        elif anchor.microsecond:
            # Slots are whole seconds: the first whole second not before the start.
            anchor = anchor.replace(microsecond=0) + timedelta(seconds=1)
        return cls(
            expression=f"{PREFIX} {format_duration(interval)}",
            timezone=timezone,
            interval=interval,
            anchor=anchor.astimezone(UTC),
            zone=get_zone(timezone),
        )

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Fire times strictly after the aware instant ``after``, in order."""
        if after.tzinfo is None or after.utcoffset() is None:
            raise ScheduleError("after", f"'after' must be timezone-aware, got naive {after!r}.")
        if after.astimezone(UTC) >= LAST_INSTANT:
            return
        step = _micros(self.interval)
        # The first k with anchor + k * step > after (floor division is exact on integers).
        k = _micros(after - self.anchor) // step + 1
        instant = self.anchor + timedelta(microseconds=k * step)
        while instant <= LAST_INSTANT:
            yield instant
            instant += self.interval

    def fire_times(self, after: datetime, limit: int) -> list[datetime]:
        return take(self.iter_after(after), limit)

    def next_after(self, after: datetime) -> datetime | None:
        return next(self.iter_after(after), None)

    def dst_note(self, instant: datetime) -> str | None:
        """Intervals keep real time; a fire time is never moved by a DST change."""
        return None

    def last_fire(self) -> datetime | None:
        """Intervals never end on their own (``end_at`` ends them)."""
        return None


def _micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * _US + delta.microseconds
