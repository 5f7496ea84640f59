"""The audit trail of jobs: who changed what, through which door, and why.

Every save of a :class:`~django_cluster_cron.models.JobDefinition` writes a
:class:`~django_cluster_cron.models.JobChange` in the same transaction, with the fields that changed
(old and new values). Who made it comes from the context the change runs in::

    with audit.acting("alice", via="admin", user=request.user, note="moved to the night"):
        job.save()

The admin, the API, ``sync_jobs``/``migrate`` and ``import_celery_beat`` set it; a save outside any
context (a shell, your own code) is recorded with ``via="shell"``. Changes the cluster makes with a
conditional UPDATE (a pause after repeated failures) call :func:`record` themselves. Operator
actions that are not field changes (run now, backfill) are recorded as actions with a note.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .validation import DEFINITION_FIELDS

if TYPE_CHECKING:
    from .models import JobChange, JobDefinition

# What a change is recorded for; bookkeeping (next_run_at, the watermark, counters) is not.
AUDITED_FIELDS = ("name", "enabled", "pause_note", *DEFINITION_FIELDS, "deleted_at")


@dataclass(frozen=True)
class Actor:
    name: str = ""
    via: str = "shell"
    user_id: int | None = None
    note: str = ""


_current: contextvars.ContextVar[Actor | None] = contextvars.ContextVar(
    "django_cluster_cron_actor", default=None
)


def current() -> Actor:
    return _current.get() or Actor()


@contextmanager
def acting(
    name: str | None = None,
    *,
    via: str | None = None,
    user: Any = None,
    note: str | None = None,
) -> Iterator[Actor]:
    """Attribute the job changes made inside to ``name`` (a user, "code sync", ...).

    Arguments left out keep the enclosing context's: ``acting(note=...)`` inside a request only
    adds the note.
    """
    actor = current()
    changes: dict[str, Any] = {}
    if name is not None:
        changes["name"] = name[:150]
    if via is not None:
        changes["via"] = via
    if user is not None and getattr(user, "is_authenticated", False):
        changes["user_id"] = user.pk
        changes.setdefault("name", user.get_username()[:150])
    if note is not None:
        changes["note"] = note
    token = _current.set(replace(actor, **changes))
    try:
        yield current()
    finally:
        _current.reset(token)


def acting_for(request: Any, via: str, note: str | None = None) -> Any:
    """The context of a web request: its user, through ``via`` (admin, api)."""
    return acting(via=via, user=getattr(request, "user", None), note=note)


def plain(value: Any) -> Any:
    """A field value as JSON can hold it (times as ISO 8601, durations in seconds)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return str(value)
    return value


def snapshot(values: Mapping[str, Any]) -> dict[str, Any]:
    return {field: plain(values[field]) for field in AUDITED_FIELDS if field in values}


def snapshot_of(job: JobDefinition) -> dict[str, Any]:
    return snapshot({field: getattr(job, field) for field in AUDITED_FIELDS})


def stored_snapshot(job: JobDefinition) -> dict[str, Any] | None:
    """The job's audited fields as the database holds them now (None if it has no row)."""
    from .models import JobDefinition

    row = JobDefinition.all_objects.filter(pk=job.pk).values(*AUDITED_FIELDS).first()
    return None if row is None else snapshot(row)


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, list[Any]]:
    return {
        field: [before.get(field), value]
        for field, value in after.items()
        if before.get(field) != value
    }


def action_of(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> str:
    if before is None:
        return "created"
    if before.get("deleted_at") is None and after.get("deleted_at") is not None:
        return "deleted"
    if before.get("deleted_at") is not None and after.get("deleted_at") is None:
        return "restored"
    if before.get("enabled") and not after.get("enabled"):
        return "paused"
    if not before.get("enabled") and after.get("enabled"):
        return "resumed"
    return "changed"


def record_save(job: JobDefinition, before: Mapping[str, Any] | None) -> JobChange | None:
    """Record a save of ``job`` (called by ``JobDefinition.save`` inside its transaction)."""
    after = snapshot_of(job)
    changes = diff(before or {}, after) if before is not None else after
    if before is not None and not changes:
        return None
    return record(job, action_of(before, after), changes)


def record(
    job: JobDefinition,
    action: str,
    changes: Mapping[str, list[Any]] | Mapping[str, Any] | None = None,
    *,
    note: str = "",
    actor: Actor | None = None,
) -> JobChange:
    """Write one entry of ``job``'s trail, at the database's time."""
    from .dbtime import DbNow
    from .models import JobChange

    who = actor or current()
    entry = JobChange(
        job_id=job.pk,
        actor=who.name,
        user_id=who.user_id,
        via=who.via,
        action=action,
        changes=dict(changes or {}),
        note="; ".join(part for part in (note, who.note) if part),
    )
    entry.at = DbNow()  # resolved by the INSERT
    entry.save(force_insert=True)
    return entry
