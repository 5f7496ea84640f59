"""Solar schedules (``@solar <event> <latitude> <longitude>``) against two references we did not
write: Celery's own ``solar`` schedule (what django-celery-beat runs), to the second, and the US
Naval Observatory's sunrise and sunset table that PyEphem ships with its tests (Atlanta, 2007,
given to the minute)."""

from __future__ import annotations

import itertools
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import ephem
import pytest
from celery.schedules import solar

from django_cluster_cron.describe import describe
from django_cluster_cron.schedule import ScheduleError, SolarSchedule, parse, validate_schedule

UTC = timezone.utc
EVENTS = [
    "dawn_astronomical",
    "dawn_nautical",
    "dawn_civil",
    "sunrise",
    "solar_noon",
    "sunset",
    "dusk_civil",
    "dusk_nautical",
    "dusk_astronomical",
]
PLACES = {
    "Munich": ("48.1374", "11.5755"),
    "New York": ("40.7128", "-74.006"),
    "Sydney": ("-33.8688", "151.2093"),
    "Quito": ("-0.1807", "-78.4678"),
    "Tromsø": ("69.6492", "18.9553"),  # polar night and midnight sun
}
AFTER = [
    datetime(2026, 1, 10, 13, 17, 5, tzinfo=UTC),
    datetime(2026, 3, 29, 0, 30, tzinfo=UTC),
    datetime(2026, 6, 21, 22, 0, 59, tzinfo=UTC),
    datetime(2026, 11, 27, 8, 0, tzinfo=UTC),
]


def celery_next(event: str, lat: str, lon: str, after: datetime) -> datetime:
    schedule = solar(event, float(lat), float(lon), nowfun=lambda: after)  # type: ignore[arg-type]
    return after + schedule.remaining_estimate(after)


@pytest.mark.parametrize(("event", "place"), list(itertools.product(EVENTS, PLACES)))
def test_the_next_event_is_celerys_to_the_second(event: str, place: str) -> None:
    lat, lon = PLACES[place]
    ours = parse(f"@solar {event} {lat} {lon}", "UTC")
    for after in AFTER:
        theirs = celery_next(event, lat, lon, after).replace(microsecond=0)
        assert ours.next_after(after) == theirs, (event, place, after)


def test_fire_times_go_on_day_after_day_and_never_repeat_an_instant() -> None:
    munich = parse("@solar sunset 48.1374 11.5755", "Europe/Berlin")
    times = munich.fire_times(datetime(2026, 3, 20, tzinfo=UTC), 30)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(
        timedelta(hours=23, minutes=55) < gap < timedelta(hours=24, minutes=5) for gap in gaps
    )
    for earlier, later in itertools.pairwise(times):  # from a fire time, the next day's
        assert munich.next_after(earlier) == later
    # Tromsø: no sunrise from late November to mid-January; the next one is weeks away.
    tromso = parse("@solar sunrise 69.6492 18.9553", "Europe/Oslo")
    [last, first] = tromso.fire_times(datetime(2026, 11, 27, tzinfo=UTC), 2)
    assert first - last > timedelta(days=40)


def _usno_table() -> list[tuple[datetime, datetime]]:
    """(sunrise, sunset) in UTC for each day of 2007 in Atlanta, from PyEphem's copy of the
    USNO table (Eastern Standard Time, to the minute)."""
    path = Path(ephem.__file__).parent / "tests" / "usno" / "riset_sun.txt"
    rows = []
    for line in path.read_text().splitlines():
        match = re.match(r"^(\d\d)  (.*)$", line)
        if match is None:
            continue
        day, rest = int(match[1]), match[2]
        for month in range(12):
            cell = rest[month * 11 : month * 11 + 9].strip()
            if not cell:
                continue
            rise, set_ = cell.split()
            local = datetime(2007, month + 1, day)
            est = timedelta(hours=5)
            rows.append(
                (
                    local.replace(hour=int(rise[:2]), minute=int(rise[2:]), tzinfo=UTC) + est,
                    local.replace(hour=int(set_[:2]), minute=int(set_[2:]), tzinfo=UTC) + est,
                )
            )
    return rows


def test_sunrise_and_sunset_match_the_naval_observatorys_table() -> None:
    table = _usno_table()
    assert len(table) == 365
    # W084 25, N33 46
    lat, lon = f"{33 + 46 / 60:.6f}", f"{-(84 + 25 / 60):.6f}"
    rises = parse(f"@solar sunrise {lat} {lon}", "America/New_York")
    sets = parse(f"@solar sunset {lat} {lon}", "America/New_York")
    worst = timedelta(0)
    for rise, set_ in table:
        midnight = rise.replace(hour=5, minute=0)  # 00:00 EST
        for schedule, expected in ((rises, rise), (sets, set_)):
            found = schedule.next_after(midnight)
            assert found is not None
            worst = max(worst, abs(found - expected))
    # The table rounds to the minute; our instants are cut to the second.
    assert worst <= timedelta(seconds=61)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("@solar", "write '@solar <event> <latitude> <longitude>'"),
        ("@solar sunrise 48.1", "write '@solar <event> <latitude> <longitude>'"),
        ("@solar moonrise 48.1 11.5", "unknown event 'moonrise'"),
        ("@solar sunrise 91 11.5", "latitude must be between -90 and 90"),
        ("@solar sunrise 48.1 -180.5", "longitude must be between -180 and 180"),
        ("@solar sunrise 48,1 11.5", "is not a number in degrees"),
        ("@solar sunrise 48.1 1e2", "is not a number in degrees"),
    ],
)
def test_bad_solar_schedules_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        validate_schedule(text)
    assert caught.value.field == "cron"
    assert words in str(caught.value)


def test_a_solar_schedule_reads_and_says_itself() -> None:
    schedule = parse("@SOLAR Sunrise 48.1374 11.5755", "Europe/Berlin")
    assert isinstance(schedule, SolarSchedule)
    assert schedule.expression == "@solar sunrise 48.1374 11.5755"
    assert schedule.kind == "solar"
    assert describe("@solar dusk_civil 48.1374 11.5755") == (
        "At each dusk civil at latitude 48.1374, longitude 11.5755"
    )


def test_without_ephem_the_error_says_which_extra_to_install(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ephem", None)
    with pytest.raises(ScheduleError) as caught:
        validate_schedule("@solar sunrise 48.1374 11.5755")
    assert "django-cluster-cron[solar]" in str(caught.value)
