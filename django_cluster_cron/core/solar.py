"""Solar schedules: ``@solar sunrise 48.1374 11.5755`` fires at each sunrise at that place.

The events and their definitions are Celery's (``celery.schedules.solar``, which
django-celery-beat's solar schedules use), computed by the same library, PyEphem (the ``solar``
extra), so a schedule imported from django-celery-beat keeps its times to the second:

* ``dawn_astronomical``, ``dawn_nautical``, ``dawn_civil``: the sun's centre rising through 18,
  12 or 6 degrees below the horizon;
* ``sunrise``, ``sunset``: its upper edge rising or setting through 34 arcminutes below;
* ``solar_noon``: its transit, the highest point of the day;
* ``dusk_civil``, ``dusk_nautical``, ``dusk_astronomical``: its centre setting through 6, 12 or
  18 degrees below.

Sea level, no atmospheric refraction model (the 34 arcmin stand for it, as in the US Naval
Observatory's tables). Where an event does not happen for a while (polar day or night), the next
one may be months away; one that does not happen within a year ends the iteration.

Each fire time is the event's instant cut to the whole second. The search for the next one
starts at the second after the previous fire time, so a cut-down instant is never found twice,
and every call builds its own observer: a pure function of (event, place, instant), the same on
every host.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from decimal import Decimal, InvalidOperation
from typing import Any

from .errors import ScheduleError
from .kinds import LAST_INSTANT, take
from .timezones import UTC, get_zone

__all__ = ["EVENTS", "SolarSchedule"]

PREFIX = "@solar"
# event: (horizon, measured at the sun's centre, the observer's search)
EVENTS: dict[str, tuple[str, bool, str]] = {
    "dawn_astronomical": ("-18", True, "next_rising"),
    "dawn_nautical": ("-12", True, "next_rising"),
    "dawn_civil": ("-6", True, "next_rising"),
    "sunrise": ("-0:34", False, "next_rising"),
    "solar_noon": ("0", False, "next_transit"),
    "sunset": ("-0:34", False, "next_setting"),
    "dusk_civil": ("-6", True, "next_setting"),
    "dusk_nautical": ("-12", True, "next_setting"),
    "dusk_astronomical": ("-18", True, "next_setting"),
}
SEARCH_DAYS = 366
_NUMBER = re.compile(r"^[+-]?[0-9]{1,3}(?:\.[0-9]{1,8})?$")
_SECOND = timedelta(seconds=1)


def _fail(message: str) -> ScheduleError:
    return ScheduleError("cron", message)


def _ephem() -> Any:
    try:
        import ephem
    except ImportError:
        raise _fail(
            "solar schedules need the 'ephem' package: pip install 'django-cluster-cron[solar]'."
        ) from None
    return ephem


def _coordinate(text: str, name: str, limit: int, written: str) -> Decimal:
    if not _NUMBER.match(text):
        raise _fail(
            f"'{written}': the {name} {text!r} is not a number in degrees (decimal, up to 8 "
            "places, e.g. 48.1374)."
        )
    value = Decimal(text)
    if abs(value) > limit:
        raise _fail(f"'{written}': the {name} must be between -{limit} and {limit}, got {text}.")
    return value


@dataclass(frozen=True)
class SolarSchedule:
    """``@solar <event> <latitude> <longitude>``: each time the event happens there."""

    expression: str
    timezone: str
    event: str
    latitude: Decimal
    longitude: Decimal
    zone: tzinfo = field(repr=False, compare=False)
    kind = "solar"
    wall_clock = False

    @classmethod
    def parse(cls, expression: str, timezone: str) -> SolarSchedule:
        written = " ".join(expression.split())
        parts = written.split(" ")
        if parts[0].lower() != PREFIX or len(parts) != 4:
            raise _fail(
                f"'{written}': write '@solar <event> <latitude> <longitude>', e.g. "
                "'@solar sunrise 48.1374 11.5755' (events: " + ", ".join(EVENTS) + ")."
            )
        event = parts[1].lower()
        if event not in EVENTS:
            raise _fail(f"'{written}': unknown event {parts[1]!r}; one of " + ", ".join(EVENTS))
        try:
            latitude = _coordinate(parts[2], "latitude", 90, written)
            longitude = _coordinate(parts[3], "longitude", 180, written)
        except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
            raise _fail(f"'{written}': latitude and longitude must be numbers.") from None
        _ephem()
        return cls(
            expression=f"{PREFIX} {event} {latitude} {longitude}",
            timezone=timezone,
            event=event,
            latitude=latitude,
            longitude=longitude,
            zone=get_zone(timezone),
        )

    def _next_event(self, start: datetime) -> datetime | None:
        """The first event at or after ``start`` (UTC, whole second), cut to the second."""
        ephem = _ephem()
        horizon, centre, search = EVENTS[self.event]
        observer = ephem.Observer()
        # Text, not floats: ephem reads a float as radians.
        observer.lat, observer.lon = str(self.latitude), str(self.longitude)
        observer.elevation, observer.pressure, observer.horizon = 0, 0, horizon
        sun = ephem.Sun()
        moment = ephem.Date(start.replace(tzinfo=None))
        options = {"use_center": True} if centre else {}
        for _ in range(SEARCH_DAYS):
            try:
                found = getattr(observer, search)(sun, start=moment, **options)
            except ephem.CircumpolarError:  # not today: look again after the next midnight sun
                moment = observer.next_antitransit(sun, start=moment)
                continue
            return found.datetime().replace(microsecond=0, tzinfo=UTC)  # type: ignore[no-any-return]
        return None

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        if after.tzinfo is None or after.utcoffset() is None:
            raise ScheduleError("after", f"'after' must be timezone-aware, got naive {after!r}.")
        start = after.astimezone(UTC).replace(microsecond=0) + _SECOND
        while start < LAST_INSTANT:
            instant = self._next_event(start)
            if instant is None or instant > LAST_INSTANT:
                return
            yield instant
            start = instant + _SECOND

    def fire_times(self, after: datetime, limit: int) -> list[datetime]:
        return take(self.iter_after(after), limit)

    def next_after(self, after: datetime) -> datetime | None:
        return next(self.iter_after(after), None)

    def dst_note(self, instant: datetime) -> str | None:
        return None

    def last_fire(self) -> datetime | None:
        return None
