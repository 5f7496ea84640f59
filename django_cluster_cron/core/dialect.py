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

Month names ``jan``-``dec`` and day names ``sun``-``sat`` stand for numbers anywhere a number may
stand; day-of-week 0 and 7 are both Sunday. Day-of-month and day-of-week combine as in Vixie
cron: when either field's text starts with ``*`` a day must match both, otherwise either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from .errors import ScheduleError

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

_PRINTABLE = re.compile(r"[\x20-\x7e\t]+")
_VALUE = r"[0-9]+|[a-z]+"
_RANGE_ITEM = re.compile(
    rf"^(?:(?P<star>\*)|(?P<start>{_VALUE})(?:-(?P<end>{_VALUE}))?)(?:/(?P<step>[0-9]+))?$"
)
_LAST_WEEKDAY = re.compile(rf"^(?:l(?P<after>{_VALUE})|(?P<before>{_VALUE})l)$")
_NTH_WEEKDAY = re.compile(rf"^(?P<day>{_VALUE})#(?P<nth>[0-9]+)$")


def _fail(message: str) -> ScheduleError:
    return ScheduleError("cron", message)


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


# -- parsing ---------------------------------------------------------------------------------


def normalize(expression: object) -> tuple[str, ...]:
    """Validate ``expression``; return its fields (aliases expanded, lower case).

    Raises ``ScheduleError(field="cron")`` naming the field, the value and the reason.
    """
    return _parse(expression)[0]


def parse(expression: object) -> CronFields:
    """The value sets of ``expression``; ``ScheduleError`` if it is not valid in our dialect."""
    return _parse(expression)[1]


def _parse(expression: object) -> tuple[tuple[str, ...], CronFields]:
    written = _split(expression)
    fields = tuple(part.lower() for part in written)
    sets = [
        _parse_field(spec, text, shown)
        for spec, text, shown in zip(FIELDS, fields, written, strict=False)
    ]
    minutes, hours, dom, months, dow = sets[:5]
    seconds = sets[5] if len(sets) == 6 else _FieldValues({0})
    parsed = CronFields(
        minutes=tuple(sorted(minutes.values)),
        hours=tuple(sorted(hours.values)),
        days=tuple(sorted(dom.values)),
        last_day=dom.last,
        months=tuple(sorted(months.values)),
        weekdays=tuple(sorted({d % 7 for d in dow.values})),
        last_weekdays=tuple(sorted(dow.last_weekdays)),
        nth_weekdays=tuple(sorted(dow.nth_weekdays)),
        seconds=tuple(sorted(seconds.values)),
        dom_star=fields[2].startswith("*"),
        dow_star=fields[4].startswith("*"),
        has_seconds=len(fields) == 6,
    )
    if not parsed.fires():
        raise _fail(f"Cron expression {' '.join(written)!r} never fires (no date matches it).")
    return fields, parsed


def _split(expression: object) -> tuple[str, ...]:
    """The fields as written (an alias expanded), after checking type, length and count."""
    if not isinstance(expression, str):
        raise _fail(f"Cron expression must be text, not {type(expression).__name__}.")
    text = expression.strip()
    if not text:
        raise _fail("Cron expression is empty.")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise _fail(
            f"Cron expression is {len(text)} characters long; the limit is {MAX_EXPRESSION_LENGTH}."
        )
    if not _PRINTABLE.fullmatch(text):
        raise _fail(f"Cron expression {text!r} contains characters outside printable ASCII.")
    if text.startswith("@"):
        text = text.lower()
        if text == "@reboot":
            raise _fail("@reboot is not a time schedule; a cluster scheduler cannot honour it.")
        if text not in ALIASES:
            raise _fail(f"Unknown alias {text!r}; known aliases: {', '.join(ALIASES)}.")
        text = ALIASES[text]
    written = tuple(text.split())
    if len(written) not in (5, 6):
        raise _fail(
            f"Cron expression {expression.strip()!r} has {len(written)} fields; expected 5 "
            "(minute hour day-of-month month day-of-week) or 6 (the same plus seconds last)."
        )
    return written


@dataclass
class _FieldValues:
    values: set[int]
    last: bool = False
    last_weekdays: set[int] = field(default_factory=set)
    nth_weekdays: set[tuple[int, int]] = field(default_factory=set)


def _parse_field(spec: FieldSpec, text: str, shown: str) -> _FieldValues:
    result = _FieldValues(set())
    for item, shown_item in zip(text.split(","), shown.split(","), strict=True):
        if not item:
            raise _fail(f"{spec.name} field: {shown!r} has an empty list item.")
        _parse_item(spec, item, shown_item, result)
    return result


def _parse_item(spec: FieldSpec, item: str, shown: str, into: _FieldValues) -> None:
    if spec is DAY_OF_MONTH and item == "l":
        into.last = True
        return
    if spec is DAY_OF_WEEK:
        last = _LAST_WEEKDAY.match(item)
        if last:
            into.last_weekdays.add(_value(spec, last["after"] or last["before"], shown) % 7)
            return
        nth = _NTH_WEEKDAY.match(item)
        if nth:
            day = _value(spec, nth["day"], shown)
            if not 1 <= int(nth["nth"]) <= 5:
                raise _fail(f"day-of-week field: {shown!r} — the week number after # must be 1-5.")
            into.nth_weekdays.add((day % 7, int(nth["nth"])))
            return
    match = _RANGE_ITEM.match(item)
    if not match:
        raise _fail(f"{spec.name} field: {shown!r} is not valid cron syntax.{_hint(spec, item)}")
    step = 1
    if match["step"] is not None:
        step = int(match["step"])
        if step < 1:
            raise _fail(f"{spec.name} field: {shown!r} — the step after / must be 1 or more.")
    if match["star"]:
        low, high = spec.low, spec.high
    else:
        low = _value(spec, match["start"], shown)
        high = spec.high if match["end"] is None and match["step"] else low
        if match["end"] is not None:
            high = _value(spec, match["end"], shown)
            if high < low:
                raise _fail(_backwards(spec, shown, match["start"], match["end"], low, high))
    into.values.update(range(low, high + 1, step))


def _value(spec: FieldSpec, text: str, shown: str) -> int:
    if text.isdigit():
        number = int(text)
    elif text in spec.names:
        number = spec.names.index(text) + spec.names_start
    elif _hint(spec, shown.lower()) or not spec.names:
        raise _fail(
            f"{spec.name} field: {shown!r} is not valid cron syntax.{_hint(spec, shown.lower())}"
        )
    else:
        raise _fail(
            f"{spec.name} field: {shown!r} — {text!r} is not a number or a name "
            f"({', '.join(spec.names[:3])}, …)."
        )
    if not spec.low <= number <= spec.high:
        raise _fail(
            f"{spec.name} field: {shown!r} — {number} is out of range {spec.low}-{spec.high}."
        )
    return number


def _backwards(spec: FieldSpec, shown: str, start: str, end: str, low: int, high: int) -> str:
    message = f"{spec.name} field: range {shown!r} runs backwards"
    if spec is DAY_OF_WEEK and high == 0:
        return f"{message}; Sunday is also 7, so write {low}-7."
    return f"{message}; write it as two ranges ({start}-{spec.high},{spec.low}-{end})."


def _hint(spec: FieldSpec, item: str) -> str:
    if "?" in item:
        return " Use * instead of ?."
    if "w" in item and spec is DAY_OF_MONTH:
        return " The nearest-weekday form (W) is not supported."
    if item.startswith("h") or "h(" in item:
        return " Hashed values (H) are not supported."
    if "l" in item:
        return (
            " L is allowed alone in day-of-month (last day) and as '5L' or 'L5' in day-of-week "
            "(last Friday), without ranges or steps."
        )
    if "#" in item:
        return " '#' is allowed in day-of-week only, as '<day>#<1-5>' (5#2: the second Friday)."
    return ""
