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
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

from django.utils.text import slugify

from ...core.errors import ScheduleError
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
