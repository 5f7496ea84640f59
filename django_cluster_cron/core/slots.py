"""Deterministic Celery task ids for (job, slot).

Every scheduler host computes the same id for the same slot, so a re-publish from the outbox or a
second leader's publish carries the id of the run row it belongs to, and the worker can tell a
copy from a stranger. The id is readable on purpose: ``cron-42-20240310T070000Z`` tells an
operator in Flower or a broker UI which job and which slot a message is.
"""

from __future__ import annotations

import re
from datetime import datetime

from .errors import ScheduleError
from .timezones import UTC

_PREFIX = "cron"
_TASK_ID = re.compile(
    rf"^{_PREFIX}-(?P<job>[0-9]+)-(?P<stamp>[0-9]{{8}}T[0-9]{{6}}(?:\.[0-9]{{6}})?)Z$"
)


def task_id_for(job_id: int, slot: datetime) -> str:
    """The task id of ``job_id``'s run for ``slot`` (an aware datetime); pure and stable."""
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 0:
        raise ScheduleError("job_id", f"job id must be a non-negative integer, got {job_id!r}.")
    if slot.tzinfo is None or slot.utcoffset() is None:
        raise ScheduleError("slot", f"slot must be timezone-aware, got naive {slot!r}.")
    utc = slot.astimezone(UTC)
    stamp = utc.strftime("%Y%m%dT%H%M%S")
    if utc.microsecond:
        stamp += f".{utc.microsecond:06d}"
    return f"{_PREFIX}-{job_id}-{stamp}Z"


def parse_task_id(task_id: str) -> tuple[int, datetime] | None:
    """Invert :func:`task_id_for`; ``None`` if ``task_id`` is not one of ours."""
    match = _TASK_ID.match(task_id) if isinstance(task_id, str) else None
    if match is None:
        return None
    stamp = match["stamp"]
    fmt = "%Y%m%dT%H%M%S.%f" if "." in stamp else "%Y%m%dT%H%M%S"
    try:
        slot = datetime.strptime(stamp, fmt).replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(match["job"]), slot
