"""IANA time zones: validation and the DST transition arithmetic the cron rules need.

Wall times are naive ``datetime`` objects read as local clock readings in a zone; instants are
aware UTC datetimes. A wall time can be *imaginary* (skipped by a spring-forward gap), *ambiguous*
(repeated by a fall-back) or plain.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from datetime import datetime, timezone, tzinfo

from .errors import ScheduleError

UTC = timezone.utc

# Keys look like "Area/Location" or "UTC"; anything else (paths, spaces, "..") is refused before
# zoneinfo ever sees it, so a name can never be used to read an arbitrary file.
_ZONE_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9][A-Za-z0-9_+\-]*)*$")
_MAX_ZONE_KEY = 64


@functools.lru_cache(maxsize=1)
def available_timezones() -> frozenset[str]:
    """Every IANA zone name this installation knows (system database or the tzdata package)."""
    return frozenset(zoneinfo.available_timezones())


@functools.lru_cache(maxsize=512)
def get_zone(name: str) -> zoneinfo.ZoneInfo:
    """Return the zone called ``name`` or raise ``ScheduleError(field="timezone")``."""
    if not isinstance(name, str) or not name.strip():
        raise ScheduleError(
            "timezone", "Time zone is empty: give an IANA name such as 'Europe/Berlin'."
        )
    if name != name.strip():
        raise ScheduleError("timezone", f"Time zone {name!r} has leading or trailing spaces.")
    if len(name) > _MAX_ZONE_KEY or not _ZONE_KEY.match(name):
        raise ScheduleError(
            "timezone",
            f"{_shorten(name)!r} is not a time zone name: use an IANA name such as "
            "'America/New_York' or 'UTC'.",
        )
    if name not in available_timezones():
        hint = _suggest(name)
        raise ScheduleError(
            "timezone",
            f"Unknown time zone {name!r}: not in the IANA database"
            + (f" (did you mean {hint!r}?)." if hint else "."),
        )
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as exc:  # pragma: no cover
        raise ScheduleError("timezone", f"Time zone {name!r} could not be loaded: {exc}.") from exc


def _suggest(name: str) -> str | None:
    lowered = name.lower().replace(" ", "_")
    for candidate in sorted(available_timezones()):
        if candidate.lower() == lowered or candidate.lower().endswith("/" + lowered):
            return candidate
    return None


def _shorten(value: str, limit: int = 40) -> str:
    return value if len(value) <= limit else value[:limit] + "…"


def is_fixed_offset(zone: tzinfo) -> bool:
    """True for zones without DST (UTC and friends) where every wall time maps 1:1."""
    return getattr(zone, "key", None) in {"UTC", "Etc/UTC", "Etc/UCT", "Etc/Universal", "Etc/Zulu"}


def to_instant(wall: datetime, zone: tzinfo, fold: int = 0) -> datetime:
    """The UTC instant of a (real) wall time; ``fold`` picks the occurrence of a repeated one."""
    return wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)


def to_wall(instant: datetime, zone: tzinfo) -> datetime:
    """The naive local wall time of an aware instant."""
    return instant.astimezone(zone).replace(tzinfo=None)


def is_imaginary(wall: datetime, zone: tzinfo) -> bool:
    """True if the clock never shows ``wall`` in ``zone`` (it lies in a spring-forward gap)."""
    return to_wall(to_instant(wall, zone), zone) != wall


def is_ambiguous(wall: datetime, zone: tzinfo) -> bool:
    """True if the clock shows ``wall`` twice in ``zone`` (a fall-back repeat)."""
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    return first != second and not is_imaginary(wall, zone)


def _transition_between(lo: datetime, hi: datetime, zone: tzinfo) -> datetime:
    """The first whole-second instant in (lo, hi] whose UTC offset is the one at ``hi``.

    Transitions in the tz database fall on whole seconds, so a binary search over integer
    timestamps finds the exact instant the clock jumped.
    """
    target = hi.astimezone(zone).utcoffset()
    low = int(lo.timestamp())
    high = int(hi.timestamp())
    while high - low > 1:
        mid = (low + high) // 2
        if datetime.fromtimestamp(mid, UTC).astimezone(zone).utcoffset() == target:
            high = mid
        else:
            low = mid
    return datetime.fromtimestamp(high, UTC)


def gap_end(wall: datetime, zone: tzinfo) -> datetime:
    """For an imaginary wall time: the first real instant after its gap (the transition)."""
    a = to_instant(wall, zone, fold=0)
    b = to_instant(wall, zone, fold=1)
    return _transition_between(min(a, b), max(a, b), zone)
