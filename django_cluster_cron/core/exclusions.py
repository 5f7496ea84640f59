"""Exclusions: dates on which a schedule does not fire, whatever its kind.

A job's exclusions are a list of rules, each one text:

* ``2026-12-24`` — one date;
* ``2026-12-27..2027-01-01`` — every date from the first to the last, both included;
* ``holidays:DE`` or ``holidays:DE-BY`` — the public holidays of a country (ISO 3166 code),
  optionally of one subdivision, as the ``holidays`` package knows them (an optional extra).

A rule is about the *local date in the job's zone* of each fire time: ``0 23 * * *`` in
America/New_York on 2026-12-24 is excluded by ``2026-12-24`` although it is 04:00 UTC on the
25th. An excluded instant is not a slot: nothing is recorded, run, caught up or backfilled for
it, and the preview says which dates were excluded and why.

:class:`ExcludingSchedule` wraps any schedule. It skips a whole excluded day at once (it asks
the schedule for its first fire time after that day), so an every-second job over a two-week
exclusion costs fourteen look-ups, not a million.
"""

from __future__ import annotations

import functools
import heapq
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo

from .errors import ScheduleError
from .kinds import LAST_INSTANT, Schedule, take
from .timezones import gap_end, is_imaginary, to_instant, to_wall

__all__ = ["ExcludingSchedule", "Exclusions", "parse_exclusions"]

MAX_RULES = 200
# The previews' list of excluded dates looks at this many excluded dates at most (ten years of a
# long range of dates that the schedule rarely fires on).
MAX_LOOKED = 10_000
# The previews name at least this many excluded dates ahead, however far beyond the runs listed.
AHEAD = 3
# A schedule whose fire times over this long are all excluded never fires again (validation
# refuses it when it is written).
NEVER_AGAIN = timedelta(days=3653)
HOLIDAYS_PREFIX = "holidays:"
_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_CALENDAR = re.compile(r"^(?P<country>[A-Za-z]{2,3})(?:-(?P<subdiv>[A-Za-z0-9]{1,20}))?$")


def _fail(message: str) -> ScheduleError:
    return ScheduleError("exclusions", message)


def _date(text: str, rule: str) -> date:
    if not _DATE.match(text):
        raise _fail(f"{rule!r}: {text!r} is not a date; write YYYY-MM-DD, e.g. '2026-12-24'.")
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise _fail(f"{rule!r}: {exc} (no such date).") from None


@functools.lru_cache(maxsize=1024)
def _holidays_of_year(country: str, subdiv: str | None, year: int) -> dict[date, str]:
    import holidays

    # Names in English whatever the process's locale (the package follows LANG otherwise), so
    # every host and every preview says the same thing.
    calendar = holidays.country_holidays(country, subdiv=subdiv, years=year, language="en_US")
    return dict(calendar.items())


def _check_calendar(country: str, subdiv: str | None, rule: str) -> None:
    try:
        import holidays
    except ImportError:
        raise _fail(
            f"{rule!r}: public-holiday calendars need the 'holidays' package: "
            "pip install 'django-cluster-cron[holidays]'."
        ) from None
    try:
        holidays.country_holidays(country, subdiv=subdiv)  # checks the codes, computes nothing
    except NotImplementedError:
        if subdiv is None:
            raise _fail(
                f"{rule!r}: the holidays package has no calendar for the country {country!r} "
                "(use its ISO 3166 code, e.g. 'holidays:DE')."
            ) from None
        known = holidays.list_supported_countries().get(country)
        listed = f" Its subdivisions: {', '.join(known[:40])}." if known else ""
        raise _fail(
            f"{rule!r}: the holidays package knows no subdivision {subdiv!r} of "
            f"{country!r}.{listed}"
        ) from None


@dataclass(frozen=True)
class Exclusions:
    """Parsed rules: single dates, inclusive ranges, holiday calendars (country, subdivision)."""

    rules: tuple[str, ...]
    dates: frozenset[date] = field(repr=False)
    ranges: tuple[tuple[date, date], ...] = field(repr=False)
    calendars: tuple[tuple[str, str | None], ...] = field(repr=False)

    def days_between(self, first: date, last: date) -> Iterator[date]:
        """Every excluded date from ``first`` to ``last`` (both included), in order, read from
        the rules themselves (the holiday calendars a year at a time, as they are reached)."""

        def dates() -> Iterator[date]:
            yield from sorted(day for day in self.dates if first <= day <= last)

        def each_day(start: date, end: date) -> Iterator[date]:
            for offset in range((end - start).days + 1):
                yield start + timedelta(days=offset)

        def holidays(country: str, subdiv: str | None) -> Iterator[date]:
            for year in range(first.year, last.year + 1):
                found = _holidays_of_year(country, subdiv, year)
                yield from sorted(day for day in found if first <= day <= last)

        sources = [
            dates(),
            *(each_day(max(a, first), min(b, last)) for a, b in self.ranges),
            *(holidays(country, subdiv) for country, subdiv in self.calendars),
        ]
        previous = None
        for day in heapq.merge(*sources):
            if day != previous:
                yield day
            previous = day

    def reason(self, day: date) -> str | None:
        """Why ``day`` is excluded ("2026-12-25: Christmas Day (DE-BY)"), or None."""
        if day in self.dates:
            return f"{day}: an excluded date"
        for first, last in self.ranges:
            if first <= day <= last:
                return f"{day}: in the excluded range {first}..{last}"
        for country, subdiv in self.calendars:
            name = _holidays_of_year(country, subdiv, day.year).get(day)
            if name is not None:
                where = f"{country}-{subdiv}" if subdiv else country
                return f"{day}: {name} ({where})"
        return None


def parse_exclusions(rules: object) -> Exclusions:
    """Read a list of rules; ``ScheduleError(field="exclusions")`` names the rule at fault."""
    if rules is None:
        rules = ()
    if not isinstance(rules, (list, tuple)):
        raise _fail(
            "Exclusions must be a list of rules, e.g. ['holidays:DE-BY', '2026-12-24', "
            f"'2026-12-27..2026-12-31'], got {type(rules).__name__}."
        )
    items = list(rules)
    if len(items) > MAX_RULES:
        raise _fail(f"At most {MAX_RULES} exclusion rules, got {len(items)}.")
    dates: set[date] = set()
    ranges: list[tuple[date, date]] = []
    calendars: list[tuple[str, str | None]] = []
    written: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise _fail(f"Each exclusion is text, got {item!r} ({type(item).__name__}).")
        rule = item.strip()
        if rule.lower().startswith(HOLIDAYS_PREFIX):
            match = _CALENDAR.match(rule[len(HOLIDAYS_PREFIX) :].strip())
            if match is None:
                raise _fail(
                    f"{rule!r}: write 'holidays:<country>' or 'holidays:<country>-<subdivision>' "
                    "with ISO 3166 codes, e.g. 'holidays:US' or 'holidays:DE-BY'."
                )
            country = match["country"].upper()
            subdiv = match["subdiv"]
            if subdiv and len(subdiv) <= 3:  # an ISO code; longer names keep their spelling
                subdiv = subdiv.upper()
            _check_calendar(country, subdiv, rule)
            calendars.append((country, subdiv))
            rule = f"{HOLIDAYS_PREFIX}{country}" + (f"-{subdiv}" if subdiv else "")
        elif ".." in rule:
            first_text, _, last_text = rule.partition("..")
            first, last = _date(first_text.strip(), rule), _date(last_text.strip(), rule)
            if last < first:
                raise _fail(f"{rule!r}: the range ends before it starts.")
            ranges.append((first, last))
            rule = f"{first}..{last}"
        elif rule:
            dates.add(_date(rule, rule))
        else:
            raise _fail("An exclusion rule is empty.")
        written.append(rule)
    return Exclusions(
        tuple(written), frozenset(dates), tuple(ranges), tuple(dict.fromkeys(calendars))
    )


@dataclass(frozen=True)
class ExcludingSchedule:
    """A schedule whose fire times on excluded local dates are not slots."""

    inner: Schedule
    exclusions: Exclusions

    @property
    def expression(self) -> str:
        return self.inner.expression

    @property
    def timezone(self) -> str:
        return self.inner.timezone

    @property
    def zone(self) -> tzinfo:
        return self.inner.zone

    @property
    def kind(self) -> str:
        return self.inner.kind

    @property
    def wall_clock(self) -> bool:
        return self.inner.wall_clock

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        for instant, reason in self._walk(after):
            if reason is None:
                yield instant

    def excluded_ahead(
        self, after: datetime, until: datetime, at_least: int = AHEAD
    ) -> list[tuple[datetime, str]]:
        """The excluded dates on which the schedule would fire after ``after``: each one whose
        first such fire time is at or before ``until``, and at least ``at_least`` however far
        ahead (within ten years); in order, each with that fire time and why it is excluded.

        It walks the excluded dates, not the fire times: the next public holiday of an
        every-minute job, months away, costs a look-up per excluded date, not one per minute.
        """
        found: list[tuple[datetime, str]] = []
        first = to_wall(after, self.zone).date()
        end = LAST_INSTANT.date()
        last = first + NEVER_AGAIN if first < end - NEVER_AGAIN else end
        fire: datetime | None = None  # the first fire time after the start of the day looked at
        for looked, day in enumerate(self.exclusions.days_between(first, last)):
            if looked >= MAX_LOOKED or len(found) >= MAX_RULES:
                break
            begin = max(after, self._start_of(day) - _TICK)
            if fire is None or fire <= begin:
                fire = self.inner.next_after(begin)
                if fire is None:  # no more fire times at all
                    break
            if to_wall(fire, self.zone).date() != day:  # it does not fire on that day
                continue
            if fire > until and len(found) >= at_least:
                break
            found.append((fire, self.exclusions.reason(day) or str(day)))
        return found

    def excluded_between(self, after: datetime, until: datetime, limit: int = 100_000) -> int:
        """How many fire times of the schedule in ``(after, until]`` fall on excluded dates (at
        most ``limit``): the slots its exclusions kept from running. Walks the excluded dates
        first, so a span with none costs a look-up, not one per fire time."""
        count = 0
        for fire, _reason in self.excluded_ahead(after, until, at_least=0):
            if fire > until:
                break
            day = to_wall(fire, self.zone).date()
            for instant in self.inner.iter_after(fire - _TICK):
                if instant > until or to_wall(instant, self.zone).date() != day:
                    break
                count += 1
                if count >= limit:
                    return count
        return count

    def _walk(self, after: datetime) -> Iterator[tuple[datetime, str | None]]:
        """Every fire time of the inner schedule after ``after`` with None, except that each
        excluded date appears once, with its reason, at its first fire time. Ends when ten
        years pass with every fire time excluded (the schedule never fires again)."""
        kept = after
        while True:
            for instant in self.inner.iter_after(after):
                day = to_wall(instant, self.zone).date()
                reason = self.exclusions.reason(day)
                if reason is None:
                    kept = instant
                    yield instant, None
                    continue
                if instant - kept > NEVER_AGAIN:
                    return
                yield instant, reason
                # Ask again from the end of the excluded day.
                after = max(instant, self._start_of(day + timedelta(days=1)) - _TICK)
                break
            else:
                return

    def _start_of(self, day: date) -> datetime:
        midnight = datetime(day.year, day.month, day.day)
        if midnight.year > LAST_INSTANT.year:
            return LAST_INSTANT
        if is_imaginary(midnight, self.zone):
            return gap_end(midnight, self.zone)
        return to_instant(midnight, self.zone, fold=0)

    def fire_times(self, after: datetime, limit: int) -> list[datetime]:
        return take(self.iter_after(after), limit)

    def next_after(self, after: datetime) -> datetime | None:
        return next(self.iter_after(after), None)

    def dst_note(self, instant: datetime) -> str | None:
        return self.inner.dst_note(instant)

    def last_fire(self) -> datetime | None:
        return self.inner.last_fire()


_TICK = timedelta(microseconds=1)
