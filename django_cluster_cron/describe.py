"""Cron expressions in words, for the admin ("At 02:30 AM, Monday through Friday").

Uses the cron-descriptor library after translating our dialect to its conventions (a seconds
field goes first there, last here; "last Friday" is ``5L`` there, ``L5`` here).
"""

from __future__ import annotations

import functools
import re

from .core.cron import normalize
from .core.errors import ScheduleError

_LAST_WEEKDAY = re.compile(r"\bl([0-7a-z]{1,3})\b")


@functools.lru_cache(maxsize=2048)
def describe(expression: str) -> str:
    """A human description; the expression itself if it cannot be described."""
    try:
        fields = list(normalize(expression))
    except ScheduleError:
        return expression
    if len(fields) == 6:
        fields = [fields[5], *fields[:5]]
    fields[-1] = _LAST_WEEKDAY.sub(lambda m: f"{m.group(1)}L", fields[-1])
    try:
        from cron_descriptor import Options, get_description

        options = Options()
        options.use_24hour_time_format = True
        options.verbose = False
        text: str = get_description(" ".join(fields).upper(), options)
    except Exception:  # the library refuses something our dialect allows: show it as written
        return expression
    return text
