"""The cron dialect: parsing, validation with precise messages, and DST-correct fire times.

Dialect (documented in docs/how-to/time-zones.md):

* 5 fields ``minute hour day-of-month month day-of-week``, or 6 with a seconds field *last*
  (croniter's convention: ``* * * * * */5`` is every 5 seconds).
* Aliases ``@yearly @annually @monthly @weekly @daily @midnight @hourly``.
* In a field: ``*``, numbers, ranges ``a-b`` (low to high), lists ``a,b``, steps ``*/n``, ``a-b/n``
  and ``a/n``; month and weekday names (``jan``, ``mon``); weekday 0 and 7 are Sunday.
* ``L`` in day-of-month (last day); ``L<d>`` (last weekday ``d`` of the month) and ``<d>#<n>``
  (n-th weekday ``d``) in day-of-week, with day-of-month ``*``.
* Day-of-month and day-of-week: if either field starts with ``*`` both must match (AND),
  otherwise either may match (OR) — Vixie cron's rule.

Time (DESIGN §6): croniter walks *wall-clock* time in the job's zone and this module turns wall
times into instants:

* A job whose minute and hour fields are both fixed (neither starts with ``*``) is a wall-clock
  job: a wall time inside a spring-forward gap fires once at the first instant after the gap; a
  wall time repeated by a fall-back fires once, at its first occurrence.
* Any other job (``*`` or ``*/n`` in the minute or hour field) follows real time: it fires at
  every instant whose local reading matches, so it runs in both passes of a repeated hour and not
  at wall times that never happen.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo

from croniter import croniter
from croniter.croniter import CroniterError

from .errors import ScheduleError
from .timezones import (
    UTC,
    gap_end,
    get_zone,
    is_ambiguous,
    is_fixed_offset,
    is_imaginary,
    repeated_span,
    to_instant,
    to_wall,
)

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


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    names_start: int = 0


_MINUTE = _FieldSpec("minute", 0, 59)
_HOUR = _FieldSpec("hour", 0, 23)
_DOM = _FieldSpec("day-of-month", 1, 31)
_MONTH = _FieldSpec("month", 1, 12, MONTH_NAMES, 1)
_DOW = _FieldSpec("day-of-week", 0, 7, DAY_NAMES, 0)
_SECOND = _FieldSpec("second", 0, 59)
_FIELDS = (_MINUTE, _HOUR, _DOM, _MONTH, _DOW, _SECOND)

_PRINTABLE = re.compile(r"[\x20-\x7e\t]+")
_VALUE = r"[0-9]+|[a-z]{3}"
_TOKEN = re.compile(
    rf"^(?:(?P<star>\*)|(?P<start>{_VALUE})(?:-(?P<end>{_VALUE}))?)(?:/(?P<step>[0-9]+))?$"
)
_LAST_WEEKDAY = re.compile(rf"^l(?P<day>{_VALUE})$")
_NTH_WEEKDAY = re.compile(rf"^(?P<day>{_VALUE})#(?P<nth>[0-9]+)$")


def _fail(message: str) -> ScheduleError:
    return ScheduleError("cron", message)


def _value(spec: _FieldSpec, text: str, token: str) -> int:
    if text.isdigit():
        number = int(text)
    elif text in spec.names:
        number = spec.names.index(text) + spec.names_start
    elif spec.names:
        raise _fail(
            f"{spec.name} field: {token!r} — {text!r} is not a number or a name "
            f"({', '.join(spec.names[:3])}, …)."
        )
    else:
        raise _fail(f"{spec.name} field: {token!r} — {text!r} is not a number.")
    if not spec.low <= number <= spec.high:
        raise _fail(
            f"{spec.name} field: {token!r} — {number} is out of range {spec.low}-{spec.high}."
        )
    return number


def _check_token(spec: _FieldSpec, token: str) -> None:
    if spec is _DOM and token == "l":
        return
    if spec is _DOW:
        last = _LAST_WEEKDAY.match(token)
        if last:
            _value(spec, last["day"], token)
            return
        nth = _NTH_WEEKDAY.match(token)
        if nth:
            _value(spec, nth["day"], token)
            if not 1 <= int(nth["nth"]) <= 5:
                raise _fail(f"day-of-week field: {token!r} — the week number after # must be 1-5.")
            return
    match = _TOKEN.match(token)
    if not match:
        extra = ""
        if "?" in token:
            extra = " Use * instead of ?."
        elif "w" in token and spec is _DOM:
            extra = " The nearest-weekday form (W) is not supported."
        elif "l" in token:
            extra = " L is allowed as 'L' in day-of-month and as 'L<day>' in day-of-week."
        raise _fail(f"{spec.name} field: {token!r} is not valid cron syntax.{extra}")
    if match["start"] is not None:
        start = _value(spec, match["start"], token)
        if match["end"] is not None:
            end = _value(spec, match["end"], token)
            if end < start:
                raise _fail(
                    f"{spec.name} field: range {token!r} runs backwards; write it as two ranges "
                    f"({match['start']}-{spec.high},{spec.low}-{match['end']})."
                )
    if match["step"] is not None:
        step = int(match["step"])
        if not 1 <= step <= spec.high:
            raise _fail(f"{spec.name} field: {token!r} — step {step} must be 1-{spec.high}.")


def _check_field(spec: _FieldSpec, text: str) -> None:
    for token in text.split(","):
        if not token:
            raise _fail(f"{spec.name} field: {text!r} has an empty list item.")
        try:
            _check_token(spec, token.lower())
        except ScheduleError as exc:
            # Messages quote the lower-cased token; show the user's own spelling instead.
            raise _fail(exc.message.replace(repr(token.lower()), repr(token), 1)) from None


def normalize(expression: object) -> tuple[str, ...]:
    """Validate ``expression`` and return its fields (aliases expanded, lower case).

    Raises ``ScheduleError(field="cron")`` naming the field, the value and the reason.
    """
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
    fields = tuple(part.lower() for part in written)
    if len(fields) not in (5, 6):
        raise _fail(
            f"Cron expression {expression.strip()!r} has {len(fields)} fields; expected 5 "
            "(minute hour day-of-month month day-of-week) or 6 (the same plus seconds last)."
        )
    for spec, part in zip(_FIELDS, written, strict=False):
        _check_field(spec, part)
    dom, dow = fields[2], fields[4]
    if (("#" in dow) or ("l" in dow)) and dom != "*":
        raise _fail(
            "day-of-week field: 'L' and '#' forms need day-of-month '*' "
            f"(got day-of-month {dom!r})."
        )
    return fields


@dataclass(frozen=True)
class CronSchedule:
    """A validated cron expression bound to a time zone; iterates fire times as UTC instants."""

    expression: str
    timezone: str
    fields: tuple[str, ...] = field(repr=False)
    zone: tzinfo = field(repr=False, compare=False)
    wall_clock: bool = field(repr=False)
    day_or: bool = field(repr=False)

    @classmethod
    def parse(cls, expression: str, timezone: str) -> CronSchedule:
        """Validate both inputs; raise ``ScheduleError`` (a ``ValueError``) if either is bad."""
        fields = normalize(expression)
        zone = get_zone(timezone)
        minute, hour, dom, _month, dow = fields[:5]
        schedule = cls(
            expression=" ".join(expression.split()),
            timezone=timezone,
            fields=fields,
            zone=zone,
            wall_clock=not (minute.startswith("*") or hour.startswith("*")),
            day_or=not (dom.startswith("*") or dow.startswith("*")),
        )
        schedule._check_fires()
        return schedule

    def _croniter(self, start: datetime) -> croniter:
        return croniter(" ".join(self.fields), start, day_or=self.day_or)

    def _check_fires(self) -> None:
        try:
            self._croniter(datetime(2000, 1, 1)).get_next(datetime)
        except CroniterError as exc:
            if "find next" in str(exc):
                raise _fail(
                    f"Cron expression {self.expression!r} never fires (no date matches it)."
                ) from exc
            raise _fail(f"Cron expression {self.expression!r} is not valid: {exc}.") from exc

    # -- iteration -------------------------------------------------------------------------

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Yield fire times strictly after the aware instant ``after``, in order, forever."""
        if after.tzinfo is None or after.utcoffset() is None:
            raise ScheduleError("after", f"'after' must be timezone-aware, got naive {after!r}.")
        after = after.astimezone(UTC)
        if is_fixed_offset(self.zone):
            candidates = self._walk_utc(after)
        elif self.wall_clock:
            candidates = self._walk_wall_clock(after)
        else:
            candidates = self._walk_real_time(after)
        last = after
        for instant in candidates:
            if instant > last:
                last = instant
                yield instant

    def fire_times(self, after: datetime, limit: int) -> list[datetime]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ScheduleError("limit", f"'limit' must be a whole number >= 0, got {limit!r}.")
        result: list[datetime] = []
        if limit == 0:
            return result
        for instant in self.iter_after(after):
            result.append(instant)
            if len(result) >= limit:
                break
        return result

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire time after ``after`` (``None`` only if the calendar runs out)."""
        return next(self.iter_after(after), None)

    def dst_note(self, instant: datetime) -> str | None:
        """Explain a fire time that a DST change moved or that falls in a repeated hour.

        ``None`` for an ordinary fire time. Used by the admin's preview of upcoming runs.
        """
        if is_fixed_offset(self.zone):
            return None
        wall = to_wall(instant, self.zone)
        earlier = to_wall(instant - timedelta(seconds=1), self.zone)
        if wall - earlier > timedelta(seconds=1) and not croniter.match(
            " ".join(self.fields), wall, day_or=self.day_or
        ):
            return f"moved: the clock skipped from {earlier:%H:%M:%S} to {wall:%H:%M} (DST starts)"
        if is_ambiguous(wall, self.zone):
            if self.wall_clock:
                return "this wall time happens twice (DST ends); the job runs at the first only"
            local = instant.astimezone(self.zone)
            which = "second" if to_instant(wall, self.zone, fold=1) == instant else "first"
            return f"{which} pass of a repeated hour (DST ends, offset {local:%z})"
        return None

    def _walls(self, start: datetime) -> Iterator[datetime]:
        iterator = self._croniter(start)
        while True:
            try:
                yield iterator.get_next(datetime)
            except CroniterError:  # no further match within croniter's horizon
                return

    def _walk_utc(self, after: datetime) -> Iterator[datetime]:
        offset = after.astimezone(self.zone).utcoffset() or timedelta(0)
        for wall in self._walls(to_wall(after, self.zone).replace(microsecond=0)):
            yield (wall - offset).replace(tzinfo=UTC)

    def _walk_wall_clock(self, after: datetime) -> Iterator[datetime]:
        for wall in self._walls(to_wall(after, self.zone).replace(microsecond=0)):
            if is_imaginary(wall, self.zone):
                yield gap_end(wall, self.zone)
            else:
                yield to_instant(wall, self.zone, fold=0)

    def _walk_real_time(self, after: datetime) -> Iterator[datetime]:
        start = to_wall(after, self.zone).replace(microsecond=0)
        if is_ambiguous(start, self.zone):
            # ``after`` sits in a repeated span: walk it from its beginning so that both passes
            # are produced in order (the caller drops what is not after ``after``).
            start = repeated_span(start, self.zone).start - timedelta(seconds=1)
        walls = self._walls(start)
        pending: datetime | None = None
        while True:
            wall = pending if pending is not None else next(walls, None)
            pending = None
            if wall is None:
                return
            if is_imaginary(wall, self.zone):
                continue
            if not is_ambiguous(wall, self.zone):
                yield to_instant(wall, self.zone)
                continue
            span = repeated_span(wall, self.zone)
            block = [wall]
            for following in walls:
                if following >= span.end:
                    pending = following
                    break
                block.append(following)
            for fold in (0, 1):
                for repeated in block:
                    yield to_instant(repeated, self.zone, fold=fold)


def fire_times(cron: str, timezone: str, after: datetime, limit: int) -> list[datetime]:
    """The next ``limit`` fire times of ``cron`` in ``timezone`` strictly after ``after``.

    ``after`` must be an aware datetime; the result is a list of aware UTC datetimes following
    the DST rules of DESIGN §6. Raises ``ValueError`` (``ScheduleError``) for a bad expression, an
    unknown time zone, an expression that never fires, a naive ``after`` or a bad ``limit``.
    """
    return CronSchedule.parse(cron, timezone).fire_times(after, limit)


def validate_cron(expression: str) -> None:
    """Raise ``ScheduleError(field="cron")`` if ``expression`` is not a usable schedule."""
    CronSchedule.parse(expression, "UTC")


def validate_timezone(name: str) -> None:
    """Raise ``ScheduleError(field="timezone")`` if ``name`` is not a known IANA zone."""
    get_zone(name)
