"""Schedules in words, for the admin and the API ("At 02:30, Monday through Friday", "Every
1 hour 30 minutes (elapsed time)", "Once, at 2026-12-24 18:00 in the job's time zone").

Intervals and one-offs are put in words here.

Uses the cron-descriptor library on the expression as our dialect reads it — rewritten from its
value sets (:meth:`~django_cluster_cron.core.dialect.CronFields.canonical`), so that library's
own reading of a spelling (``2-2``, ``*/100``, a list mixing ``#`` and ranges) never shows — and
in its conventions (a seconds field goes first there, last here).

And a schedule's preview (:func:`preview`): its words, its next runs and the dates its exclusions
leave out, as the admin's job form and the API's preview show them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

from .core.catchup import PLAIN
from .core.errors import ScheduleError
from .core.exclusions import ExcludingSchedule
from .core.interval import IntervalSchedule, duration_in_words
from .core.kinds import Schedule
from .core.oneoff import OneOffSchedule
from .core.parsing import parse
from .core.schedules import parse as parse_any
from .core.solar import SolarSchedule
from .core.timing import SlotTiming


@functools.lru_cache(maxsize=2048)
def describe(expression: str) -> str:
    """A human description; the expression itself if it cannot be described."""
    if expression.lstrip().startswith("@"):
        try:
            schedule = parse_any(expression, "UTC")
        except ScheduleError:
            return expression
        if isinstance(schedule, IntervalSchedule):
            return f"Every {duration_in_words(schedule.interval)} (elapsed time)"
        if isinstance(schedule, OneOffSchedule):
            if schedule.wall is not None:
                return f"Once, at {schedule.wall:%Y-%m-%d %H:%M:%S} in the job's time zone"
            return f"Once, at {schedule.instant:%Y-%m-%d %H:%M:%S} UTC"
        if isinstance(schedule, SolarSchedule):
            where = f"latitude {schedule.latitude}, longitude {schedule.longitude}"
            return f"At each {schedule.event.replace('_', ' ')} at {where}"
    try:
        canonical = parse(expression).canonical()
    except ScheduleError:
        return expression
    if canonical is None:  # day fields that no rewriting keeps: show it as written
        return expression
    fields = canonical.split()
    if len(fields) == 6:
        fields = [fields[5], *fields[:5]]
    try:
        from cron_descriptor import Options, get_description

        options = Options()
        options.use_24hour_time_format = True
        options.verbose = False
        text: str = get_description(" ".join(fields).upper(), options)
    except Exception:  # the library refuses something our dialect allows: show it as written
        return expression
    return text


@dataclass(frozen=True)
class Preview:
    """What a preview shows of a schedule (:func:`preview`)."""

    schedule: Schedule
    words: str  # the expression in words (:func:`describe`)
    upcoming: list[tuple[datetime, datetime]]  # the next runs, (slot, due), in due order
    excluded: list[tuple[datetime, str]]  # each date left out: its first fire time, and why


def preview(
    expression: str,
    zone: str,
    now: datetime,
    count: int,
    timing: SlotTiming = PLAIN,
    exclusions: list[str] | None = None,
) -> Preview:
    """The next ``count`` runs of a schedule after ``now``, in the job's active period and with
    its jitter (``timing``), and the dates the exclusions leave out among them and the next ones
    beyond them however far ahead (a few at least), inside that period. Raises
    ``ScheduleError``, naming the input that is wrong. Nothing is cached: input is arbitrary."""
    schedule = parse_any(expression, zone, timing.start_at, exclusions)
    upcoming = timing.upcoming(schedule, now, count)
    excluded: list[tuple[datetime, str]] = []
    if isinstance(schedule, ExcludingSchedule):
        after = max(now, timing.start_at) if timing.start_at else now
        found = schedule.excluded_ahead(after, upcoming[-1][0] if upcoming else after)
        excluded = [(f, why) for f, why in found if timing.end_at is None or f <= timing.end_at]
    return Preview(schedule, describe(expression), upcoming, excluded)
