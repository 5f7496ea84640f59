"""Reading a cron expression: from text to :class:`~.dialect.CronFields`, or a
:class:`~.errors.ScheduleError` in our words that names the field and the value at fault.

What the fields and items mean is :mod:`.dialect`'s docstring.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .dialect import (
    ALIASES,
    DAY_OF_MONTH,
    DAY_OF_WEEK,
    FIELDS,
    MAX_EXPRESSION_LENGTH,
    CronFields,
    FieldSpec,
)
from .errors import ScheduleError

_PRINTABLE = re.compile(r"[\x20-\x7e\t]+")
_VALUE = r"[0-9]+|[a-z]+"
_RANGE_ITEM = re.compile(
    rf"^(?:(?P<star>\*)|(?P<start>{_VALUE})(?:-(?P<end>{_VALUE}))?)(?:/(?P<step>[0-9]+))?$"
)
_LAST_WEEKDAY = re.compile(rf"^(?:l(?P<after>{_VALUE})|(?P<before>{_VALUE})l)$")
_NTH_WEEKDAY = re.compile(rf"^(?P<day>{_VALUE})#(?P<nth>[0-9]+)$")


def _fail(message: str) -> ScheduleError:
    return ScheduleError("cron", message)


def normalize(expression: object) -> tuple[str, ...]:
    """Validate ``expression``; return its fields (aliases expanded, lower case).

    Raises ``ScheduleError(field="cron")`` naming the field, the value and the reason.
    """
    return _parse(expression)[0]


def parse(expression: object) -> CronFields:
    """The value sets of ``expression``; ``ScheduleError`` if it is not valid in our dialect."""
    return _parse(expression)[1]


def seconds_first_habit(expression: object) -> str | None:
    """Why a valid six-field ``expression`` looks written seconds-first, or None.

    Here the seconds are the sixth field; Quartz and Spring put them first. Written their way,
    ``*/15 * * * * *`` (every 15 seconds there) reads here as every second of minutes 0, 15, 30
    and 45. An expression whose seconds field is ``*`` while another field is not fires 60
    times in a row in each minute it matches, which is almost always that mistake; ``0-59``
    says the same seconds on purpose. ``* * * * * *`` (every second) is left alone.
    """
    try:
        written = normalize(expression)
    except ScheduleError:
        return None
    if len(written) != 6 or written[5] != "*" or all(f == "*" for f in written[:5]):
        return None
    shown = " ".join(written)
    rotated = " ".join((*written[1:], written[0]))
    try:
        normalize(rotated)
    except ScheduleError:
        meant = ""
    else:
        meant = f" If you meant their order, write {rotated!r}."
    return (
        f"{shown!r} fires on every second of each minute it matches (60 runs a minute): the "
        "sixth field is the seconds, last (minute hour day-of-month month day-of-week second), "
        f"where Quartz and Spring put the seconds first.{meant} To fire on every second of "
        "those minutes on purpose, write the seconds as 0-59."
    )


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
