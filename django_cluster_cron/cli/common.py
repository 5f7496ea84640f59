"""What the verbs of ``manage.py cron`` share: the reply, refusals, finding a job or a run, times
as an operator types them, and times and tables as a terminal shows them."""

from __future__ import annotations

import getpass
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from itertools import repeat
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ValidationError
from django.utils.duration import duration_string

from ..models import DEFINITION_FIELDS, JobDefinition, JobRun
from ..redaction import ARGUMENT_FIELDS, redact
from ..validation.jsontext import EXAMPLES as JSON_EXAMPLES
from ..validation.jsontext import parse_json

UTC = timezone.utc


class Refused(Exception):
    """The verb cannot be done: exit 1, this message on stderr."""


class Usage(Refused):
    """The verb was asked wrongly (options that do not go together, a value out of range):
    exit 2, as for a usage error the parser finds, this message on stderr."""


@dataclass
class Reply:
    """What a verb prints: ``text`` for a person, ``data`` for ``--json``; ``code`` is the exit
    status (0 done, 1 the outcome was a failure: a run that failed, a wait that timed out)."""

    data: dict[str, Any]
    text: str = ""
    code: int = 0
    warnings: list[str] = field(default_factory=list)


def default_actor() -> str:
    """Who acts when ``--by`` is not given: the OS user at this host."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in the environment nor the password database
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def find_job(ref: str, *, deleted: bool = False) -> JobDefinition:
    """The job named ``ref`` (or with the id ``ref``); soft-deleted ones only if ``deleted``."""
    manager = JobDefinition.all_objects if deleted else JobDefinition.objects
    job = manager.filter(name=ref).first()
    if job is None and ref.isdigit():
        job = manager.filter(pk=int(ref)).first()
    if job is None:
        gone = "" if deleted else _deleted_note(ref)
        raise Refused(
            f"No job named {ref!r}{gone}; `manage.py cron list --search {ref}` lists names."
        )
    return cast(JobDefinition, job)


def _deleted_note(ref: str) -> str:
    if JobDefinition.all_objects.filter(name=ref, deleted_at__isnull=False).exists():
        return " (a job of that name is soft-deleted: restore it in the admin first)"
    return ""


def find_run(ref: str) -> JobRun:
    if not ref.isdigit():
        raise Refused(f"{ref!r} is not a run id: give the number `manage.py cron runs` shows.")
    run = JobRun.objects.select_related("job").filter(pk=int(ref)).first()
    if run is None:
        raise Refused(f"There is no run {ref}.")
    return cast(JobRun, run)


def json_option(text: str, field: str, *, where: str) -> Any:
    """An option's JSON for a job's ``field``, refused in the admin form's words."""
    try:
        return parse_json(text, JSON_EXAMPLES.get(field, "JSON"))
    except ValidationError as exc:
        raise Refused(f"{where}: {' '.join(exc.messages)}") from None


def zone_or_utc(name: str) -> tzinfo:
    """The zone a stored job names, for showing its times: UTC if the name is not one (a row
    saved around validation must not stop a list of every job)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def zone_named(name: str) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise Refused(
            f"{name!r} is not a time zone: give an IANA name such as Europe/Paris or UTC."
        ) from None


_RELATIVE = re.compile(r"now\s*(?:([+-])\s*(\d+)\s*([smhdw]))?")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_when(text: str, now: datetime, zone: tzinfo = UTC, *, what: str = "time") -> datetime:
    """A moment as an operator types it: ``now``, ``now+2h``, ``now-30m`` (s, m, h, d, w), an
    ISO 8601 time (with an offset, or else in ``zone``) or a date (its midnight in ``zone``)."""
    value = text.strip()
    relative = _RELATIVE.fullmatch(value.lower())
    if relative:
        sign, amount, unit = relative.groups()
        if sign is None:
            return now
        step = timedelta(**{_UNITS[unit]: int(amount)})
        return now + step if sign == "+" else now - step
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        try:
            moment = datetime.combine(date.fromisoformat(value), time(0))
        except ValueError:
            raise Refused(
                f"{what} {text!r} is not a time: give an ISO 8601 time (2026-12-01T09:00, with "
                "an offset or in the zone given), a date (2026-12-01), or now, now+2h, now-30m."
            ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment


def iso(moment: datetime | None) -> str | None:
    """A moment in the JSON replies: ISO 8601 in UTC with a Z."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def shown(moment: datetime | None, zone: tzinfo = UTC) -> str:
    """A moment for a person, to the second with its zone's abbreviation."""
    if moment is None:
        return "—"
    local = moment.astimezone(zone)
    return f"{local.isoformat(' ', 'seconds')[:19]} {local.tzname() or 'UTC'}"


def span(seconds: float) -> str:
    """A duration in a few characters: ``45s``, ``4m10s``, ``2h05m``, ``3d04h``."""
    whole = int(abs(seconds))
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def left(moment: datetime | None, now: datetime) -> str:
    """How long until ``moment`` (``in 4m10s``), or since it (``2h05m ago``)."""
    if moment is None:
        return "—"
    seconds = (moment - now).total_seconds()
    return f"in {span(seconds)}" if seconds >= 0 else f"{span(seconds)} ago"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, the last one left ragged (column by column, in
    C: a hundred thousand rows take a tenth of a second)."""
    columns = list(zip(headers, *rows, strict=True))
    padded = [
        list(map(str.ljust, column, repeat(max(map(len, column))))) for column in columns[:-1]
    ]
    return "\n".join(map(str.rstrip, map("  ".join, zip(*padded, columns[-1], strict=True))))


def state_of(job: JobDefinition) -> str:
    if job.deleted_at is not None:
        return "deleted"
    return "enabled" if job.enabled else "paused"


# What export writes of a job beside its definition, and import reads back.
STATE_FIELDS = ("enabled", "pause_note")


def job_data(job: JobDefinition, *, state: bool = False, masked: bool = False) -> dict[str, Any]:
    """A job's definition (its name and every definition field, with ``enabled`` and
    ``pause_note`` if ``state``) as JSON: moments in ISO 8601, durations as Django writes them
    (``1 00:00:00``), so that ``import`` reads back exactly what ``export`` wrote. ``masked``:
    secret-looking arguments masked, as the admin and the API show them."""
    names = ("name", *(STATE_FIELDS if state else ()), *DEFINITION_FIELDS)
    fields = {name: getattr(job, name) for name in names}
    if masked:
        for name in ARGUMENT_FIELDS:
            fields[name] = redact(fields[name])
    for name, value in fields.items():
        if isinstance(value, datetime):
            fields[name] = iso(value)
        elif isinstance(value, timedelta):
            fields[name] = duration_string(value)
    return fields


def version_of(job: JobDefinition) -> str:
    """The job's version for ``set --if-version``: when its definition was last saved."""
    return job.updated_at.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def run_data(run: JobRun) -> dict[str, Any]:
    """A run in the JSON replies."""
    return {
        "id": run.pk,
        "job": run.job_id,
        "slot": iso(run.scheduled_for),
        "status": run.status,
        "trigger": run.trigger,
        "attempt": run.attempt,
        "reason": run.reason or None,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "duration": None if run.duration is None else run.duration.total_seconds(),
        "error": run.error or None,
    }
