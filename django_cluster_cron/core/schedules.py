"""From a schedule's text to a :class:`~.kinds.Schedule` of the right kind.

``@every <duration>`` is an interval (:mod:`.interval`), ``@at <date and time>`` a one-off
(:mod:`.oneoff`), ``@solar <event> <latitude> <longitude>`` a solar schedule (:mod:`.solar`);
anything else is read as cron (:mod:`.cron`, aliases such as ``@daily``
included). One function for every caller, so the admin's preview, the API, declarations in code
and the scheduler cannot read a schedule differently.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import datetime

from . import interval, oneoff, solar
from .cron import CronSchedule
from .errors import ScheduleError
from .exclusions import ExcludingSchedule, parse_exclusions
from .interval import IntervalSchedule
from .kinds import Schedule
from .oneoff import OneOffSchedule
from .solar import SolarSchedule
from .timezones import get_zone

__all__ = ["fire_times", "parse", "parse_schedule", "validate_schedule", "validate_timezone"]


def _keyword(expression: str) -> str:
    head = expression.strip().split(None, 1)
    return head[0].lower() if head else ""


def parse(
    expression: object,
    timezone: str,
    anchor: datetime | None = None,
    exclusions: Iterable[str] | None = None,
) -> Schedule:
    """Validate ``expression``, ``timezone`` and ``exclusions``; raise ``ScheduleError`` naming
    what is wrong.

    ``anchor`` is where an interval counts from (the job's ``start_at``; the Unix epoch when
    None); cron and one-off schedules ignore it. ``exclusions`` are the dates the schedule does
    not fire on (:mod:`.exclusions`).
    """
    schedule = _parse_kind(expression, timezone, anchor)
    if exclusions is None:
        return schedule
    rules = parse_exclusions(exclusions)
    return ExcludingSchedule(schedule, rules) if rules.rules else schedule


def _parse_kind(expression: object, timezone: str, anchor: datetime | None) -> Schedule:
    if isinstance(expression, str):
        keyword = _keyword(expression)
        if keyword == interval.PREFIX:
            return IntervalSchedule.parse(expression, timezone, anchor)
        if keyword == oneoff.PREFIX:
            return OneOffSchedule.parse(expression, timezone)
        if keyword == solar.PREFIX:
            return SolarSchedule.parse(expression, timezone)
        for prefix in (interval.PREFIX, oneoff.PREFIX):
            if keyword.startswith(prefix) and keyword[len(prefix) : len(prefix) + 1].isdigit():
                raise ScheduleError(
                    "cron",
                    f"{expression.strip()!r}: put a space after {prefix!r}, e.g. '@every 90s' "
                    "or '@at 2026-12-24T18:00'.",
                )
    return CronSchedule.parse(expression, timezone)  # type: ignore[arg-type]


def parse_schedule(
    expression: str,
    timezone: str,
    anchor: datetime | None = None,
    exclusions: tuple[str, ...] = (),
) -> Schedule:
    """:func:`parse`, remembered: a parsed schedule is immutable, so the scheduler reuses one
    across ticks and across the jobs that share it (the anchor only matters to an interval)."""
    if anchor is not None and _keyword(expression) != interval.PREFIX:
        anchor = None
    return _remembered(expression, timezone, anchor, exclusions)


@functools.lru_cache(maxsize=4096)
def _remembered(
    expression: str, timezone: str, anchor: datetime | None, exclusions: tuple[str, ...]
) -> Schedule:
    return parse(expression, timezone, anchor, exclusions)


def fire_times(
    schedule: str,
    timezone: str,
    after: datetime,
    limit: int,
    *,
    anchor: datetime | None = None,
    exclusions: Iterable[str] | None = None,
) -> list[datetime]:
    """The next ``limit`` fire times of ``schedule`` in ``timezone`` strictly after ``after``.

    ``schedule`` is a cron expression, ``@every <duration>`` or ``@at <date and time>``;
    ``anchor`` is where an interval counts from (default: 1970-01-01T00:00:00Z); ``exclusions``
    lists dates it does not fire on (``"2026-12-24"``, ``"2026-12-27..2026-12-31"``,
    ``"holidays:DE-BY"``). ``after`` must
    be an aware datetime; the result is a list of aware UTC datetimes following the DST rules of
    docs/reference/schedules.md. Raises ``ValueError`` (``ScheduleError``) for a bad schedule,
    an unknown time zone, a schedule that never fires, a naive ``after`` or a bad ``limit``.
    """
    return parse(schedule, timezone, anchor, exclusions).fire_times(after, limit)


def validate_schedule(expression: str) -> None:
    """Raise ``ScheduleError(field="cron")`` if ``expression`` is not a usable schedule."""
    parse(expression, "UTC")


def validate_timezone(name: str) -> None:
    """Raise ``ScheduleError(field="timezone")`` if ``name`` is not a known IANA zone."""
    get_zone(name)
