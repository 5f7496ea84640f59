"""A job's schedule in a monitoring service's words: a standard crontab, and a slug.

Services that create a monitor from its schedule (Sentry Crons) accept five fields — minute hour
day-of-month month day-of-week — read as Vixie cron reads them, including ``L``, ``5L`` and
``5#2``. Our dialect (:mod:`django_cluster_cron.core.dialect`) says the same things, plus a sixth
field of seconds. So a schedule is given to a service as the dialect's canonical text, rewritten
from the exact value sets (names as numbers, ``7`` as ``0``, no ``a-a/n`` that readers disagree
on), and is refused, with the reason, when five fields cannot carry it:

* seconds: a job firing more than once a minute has no crontab. One firing once a minute at
  second ``s`` keeps its five fields; its check-ins arrive ``s`` seconds after the minute, which
  the monitor's margin absorbs (:func:`crontab_for` returns that shift);
* a day rule that cannot be written (both day fields restricted, a day must match both, and
  neither is ``*`` or ``*/n``: only a field text starting with ``*`` says "both").

Other kinds (:func:`schedule_for`): an interval of whole minutes goes as the service's interval
schedule (in the largest unit that divides it); a one-off and a schedule with exclusions have
none — a monitor would count each excluded date as a missed check-in.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

from django.utils.text import slugify

from ...core.errors import ScheduleError
from ...core.interval import IntervalSchedule
from ...core.parsing import parse

# Sentry's limit for a monitor slug; every service we know accepts this much.
SLUG_MAX_LENGTH = 50
_NOT_SLUG = re.compile(r"[^a-z0-9_-]+")


@dataclass(frozen=True)
class Crontab:
    """``text`` is the 5-field crontab (None if there is none, ``problem`` says why); ``shift``
    the seconds after each minute at which the job actually fires."""

    text: str | None
    problem: str = ""
    shift: int = 0
    interval: tuple[int, str] | None = None  # (count, unit) for an @every schedule


@functools.lru_cache(maxsize=1024)
def crontab_for(cron: str) -> Crontab:
    try:
        fields = parse(cron)
    except ScheduleError as exc:
        return Crontab(None, f"the job's schedule is invalid: {exc}")
    if len(fields.seconds) > 1:
        return Crontab(
            None,
            f"{cron!r} fires more than once a minute (seconds field); a crontab counts whole "
            "minutes",
        )
    canonical = fields.canonical()
    if canonical is None:
        return Crontab(
            None,
            f"{cron!r}: its two day fields must both match, which five fields can only say "
            "when one of them is '*' or '*/n'",
        )
    text = " ".join(canonical.split()[:5])
    return Crontab(text, shift=fields.seconds[0])


_UNITS = (("week", 604_800), ("day", 86_400), ("hour", 3_600), ("minute", 60))


def schedule_for(cron: str, exclusions: object = None) -> Crontab:
    """A job's schedule as a monitor can carry it, whatever its kind (see the module doc)."""
    if exclusions:
        return Crontab(
            None,
            "its exclusions leave out dates a monitor's schedule cannot (it would count each "
            "as a missed check-in)",
        )
    keyword = cron.strip().split(None, 1)[0].lower() if cron.strip() else ""
    if keyword == "@at":
        return Crontab(None, "a one-off run has no recurring schedule")
    if keyword == "@solar":
        return Crontab(None, "a solar event moves every day")
    if keyword != "@every":
        return crontab_for(cron)
    try:
        seconds = int(IntervalSchedule.parse(cron, "UTC").interval.total_seconds())
    except ScheduleError as exc:
        return Crontab(None, f"the job's schedule is invalid: {exc}")
    for unit, size in _UNITS:
        if seconds % size == 0:
            return Crontab(None, interval=(seconds // size, unit))
    return Crontab(
        None, f"an interval of {seconds} s is not whole minutes, the smallest a monitor counts"
    )


def slug_for(template: str, name: str, job_id: int) -> str:
    """The monitor's slug: ``template`` filled with the job's name and id, in lower-case letters,
    digits, ``-`` and ``_`` (what Sentry would make of it), at most 50 characters. A longer one
    is cut and given a short hash of the whole, so two long names do not share a monitor."""
    filled = template.format(job=name, id=job_id)
    slug = slugify(_NOT_SLUG.sub("-", filled.lower())).strip("-_")
    if len(slug) <= SLUG_MAX_LENGTH and slug:
        return slug
    digest = hashlib.blake2b(filled.encode(), digest_size=4).hexdigest()
    return f"{slug[: SLUG_MAX_LENGTH - 9].rstrip('-_')}-{digest}".lstrip("-")
