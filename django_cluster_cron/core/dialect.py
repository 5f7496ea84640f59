"""The cron dialect: our grammar, from text to the exact set of values each field allows.

The dialect is ours (documented in docs/how-to/time-zones.md), modelled on Vixie cron; no
library's reading of an expression leaks into it. Parsing turns an expression into a
:class:`CronFields` — sorted values per field plus the day-of-month/day-of-week rules — and every
question the scheduler asks ("which days of this month?", "does this wall time match?") is
answered from those sets.

Fields, in order: ``minute hour day-of-month month day-of-week [second]``. Within a field, a
comma-separated list is the union of its items; each item is one of

* ``*`` — every value; ``*/n`` — every n-th value from the lowest;
* ``a`` — one value; ``a-b`` — ``a`` to ``b`` inclusive (``2-2`` is just 2);
* ``a-b/n`` — every n-th value from ``a`` up to ``b``; ``a/n`` — the same up to the field's
  highest value (``5/20`` minutes: 5, 25, 45). A step larger than the range gives its first
  value alone (Vixie cron: ``*/100`` in day-of-month is the 1st);
* day-of-month only: ``L``, the last day of the month;
* day-of-week only: ``5L`` or ``L5``, the last Friday of the month; ``5#2``, the second Friday.

Reading text into these sets, with errors that name the field, is :mod:`.parsing`.

Month names ``jan``-``dec`` and day names ``sun``-``sat`` stand for numbers anywhere a number may
stand; day-of-week 0 and 7 are both Sunday. Day-of-month and day-of-week combine as in Vixie
cron: when either field's text starts with ``*`` a day must match both, otherwise either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

MAX_EXPRESSION_LENGTH = 200

ALIASES: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")

# How long each month can be: a day-of-month set is checked against these to find expressions
# that never fire. Every (month, length, weekday of the 1st) combination below does occur in the
# Gregorian calendar, so a schedule fires if and only if one of them has a matching day.
MONTH_LENGTHS: dict[int, tuple[int, ...]] = {
    1: (31,),
    2: (28, 29),
    3: (31,),
    4: (30,),
    5: (31,),
    6: (30,),
    7: (31,),
    8: (31,),
    9: (30,),
    10: (31,),
    11: (30,),
    12: (31,),
}


@dataclass(frozen=True)
class FieldSpec:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    names_start: int = 0


MINUTE = FieldSpec("minute", 0, 59)
HOUR = FieldSpec("hour", 0, 23)
DAY_OF_MONTH = FieldSpec("day-of-month", 1, 31)
MONTH = FieldSpec("month", 1, 12, MONTH_NAMES, 1)
DAY_OF_WEEK = FieldSpec("day-of-week", 0, 7, DAY_NAMES, 0)
SECOND = FieldSpec("second", 0, 59)
FIELDS = (MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK, SECOND)


@dataclass(frozen=True)
class CronFields:
    """The values an expression allows, field by field (all tuples sorted, no duplicates).

    ``weekdays`` holds 0-6 (Sunday is 0; a 7 in the text is folded in). ``last_weekdays`` holds
    the weekdays of ``<d>L`` items, ``nth_weekdays`` the ``(weekday, n)`` pairs of ``<d>#<n>``.
    ``dom_star``/``dow_star`` record whether the field's text starts with ``*``, which decides
    how the two day fields combine.
    """

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    last_day: bool
    months: tuple[int, ...]
    weekdays: tuple[int, ...]
    last_weekdays: tuple[int, ...]
    nth_weekdays: tuple[tuple[int, int], ...]
    seconds: tuple[int, ...]
    dom_star: bool
    dow_star: bool
    has_seconds: bool
    _month_days: dict[int, tuple[int, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @property
    def days_and(self) -> bool:
        """True if a day must match both day fields (Vixie cron: either starts with ``*``)."""
        return self.dom_star or self.dow_star

    def days_in(self, first_weekday: int, length: int) -> tuple[int, ...]:
        """The matching days of a month of ``length`` days whose 1st is ``first_weekday``.

        ``first_weekday`` counts from Sunday = 0. Only those two numbers matter, so there are
        at most 28 different answers; each is computed once.
        """
        key = first_weekday * 32 + length
        days = self._month_days.get(key)
        if days is None:
            days = tuple(
                day
                for day in range(1, length + 1)
                if self._day_matches(day, (first_weekday + day - 1) % 7, length)
            )
            self._month_days[key] = days
        return days

    def _day_matches(self, day: int, weekday: int, length: int) -> bool:
        by_date = day in self.days or (self.last_day and day == length)
        by_weekday = (
            weekday in self.weekdays
            or (weekday in self.last_weekdays and day > length - 7)
            or (weekday, (day - 1) // 7 + 1) in self.nth_weekdays
        )
        return (by_date and by_weekday) if self.days_and else (by_date or by_weekday)

    def fires(self) -> bool:
        """Whether any date ever matches (the time-of-day fields always allow something)."""
        return any(
            self.days_in(first, length)
            for month in self.months
            for length in MONTH_LENGTHS[month]
            for first in range(7)
        )

    def matches(self, wall: datetime) -> bool:
        """Whether the wall-clock time ``wall`` (to the second) is one this expression names."""
        if (
            wall.month not in self.months
            or wall.hour not in self.hours
            or wall.minute not in self.minutes
            or wall.second not in self.seconds
        ):
            return False
        first = wall.replace(day=1)
        length = _month_length(wall.year, wall.month)
        return wall.day in self.days_in((first.weekday() + 1) % 7, length)

    def seconds_in_hour(self) -> tuple[int, ...]:
        """Offsets from the top of an hour, in seconds, at which the expression fires."""
        return tuple(m * 60 + s for m in self.minutes for s in self.seconds)

    def canonical(self) -> str | None:
        """The expression rewritten from its value sets, or None if it cannot keep its meaning.

        Ranges are written ``a-b``, whole fields ``*``, names as numbers, ``L5`` as ``5L``; the
        seconds field stays last. The day fields are written so that Vixie cron's rule gives
        the same days; that is impossible only when both are restricted, a day must match both,
        and neither can be written as ``*/n`` — then None.
        """
        dom, dow = _format_days(self), _format_weekdays(self)
        every_date = self.days == tuple(range(1, 32))
        every_weekday = self.weekdays == tuple(range(7))
        if not self.days_and:
            if every_date or every_weekday:
                dom = dow = "*"
        elif every_date:
            dom = "*"
        elif every_weekday:
            dow = "*"
        else:
            dom_star = None if self.last_day else _as_star_step(DAY_OF_MONTH, self.days)
            dow_star = None
            if not (self.last_weekdays or self.nth_weekdays):
                dow_star = _as_star_step(_WEEKDAYS, self.weekdays)
            if dom_star is not None:
                dom = dom_star
            elif dow_star is not None:
                dow = dow_star
            else:
                return None
        parts = [
            _format(MINUTE, self.minutes),
            _format(HOUR, self.hours),
            dom,
            _format(MONTH, self.months),
            dow,
        ]
        if self.has_seconds:
            parts.append(_format(SECOND, self.seconds))
        return " ".join(parts)


# Weekdays after folding 7 into 0: what ``*/n`` of the day-of-week field ranges over when written.
_WEEKDAYS = FieldSpec("day-of-week", 0, 6)


def _month_length(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return MONTH_LENGTHS[month][0]


def _as_star_step(spec: FieldSpec, values: tuple[int, ...]) -> str | None:
    """``*`` or ``*/n`` if ``values`` is exactly what that would select, else None."""
    if not values or values[0] != spec.low:
        return None
    step = spec.high - spec.low + 1 if len(values) == 1 else values[1] - values[0]
    if tuple(range(spec.low, spec.high + 1, step)) != values:
        return None
    return "*" if step == 1 else f"*/{step}"


def _format(spec: FieldSpec, values: tuple[int, ...], star_steps: bool = True) -> str:
    """``values`` as compact text: ``*``, ``*/n``, ``a-b/n``, else ranges and single values.

    ``star_steps=False`` never writes a leading ``*`` for a partial set: in a day field the
    leading ``*`` changes how the two day fields combine.
    """
    if values == tuple(range(spec.low, spec.high + 1)):
        return "*"
    if len(values) > 2:
        step = values[1] - values[0]
        if step > 1 and values == tuple(range(values[0], values[-1] + 1, step)):
            if star_steps and _as_star_step(spec, values):
                return f"*/{step}"
            return f"{values[0]}-{values[-1]}/{step}"
    parts: list[str] = []
    start = previous = values[0]
    for value in (*values[1:], None):
        if value is not None and value == previous + 1:
            previous = value
            continue
        if previous - start >= 2:
            parts.append(f"{start}-{previous}")
        else:
            parts.extend(str(v) for v in range(start, previous + 1))
        if value is not None:
            start = previous = value
    return ",".join(parts)


def _format_days(fields: CronFields) -> str:
    if fields.days == tuple(range(1, 32)):
        return "*"
    parts = [_format(DAY_OF_MONTH, fields.days, star_steps=False)] if fields.days else []
    if fields.last_day:
        parts.append("L")
    return ",".join(parts)


def _format_weekdays(fields: CronFields) -> str:
    if fields.weekdays == tuple(range(7)):
        return "*"
    parts = [_format(_WEEKDAYS, fields.weekdays, star_steps=False)] if fields.weekdays else []
    parts.extend(f"{day}L" for day in fields.last_weekdays)
    parts.extend(f"{day}#{nth}" for day, nth in fields.nth_weekdays)
    return ",".join(parts)
