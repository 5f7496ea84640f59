"""The audit trail of jobs, the part that knows no database: who is acting, and what changed.

Every save of a :class:`~django_cluster_cron.models.JobDefinition` writes a
:class:`~django_cluster_cron.models.JobChange` in the same transaction, with the fields that changed
(old and new values; the writer is :mod:`django_cluster_cron.models.changes`). Who made it comes
from the context the change runs in::

    with audit.acting("alice", via="admin", user=request.user, note="moved to the night"):
        job.save()

The admin, the API, ``sync_jobs``/``migrate`` and ``import_celery_beat`` set it; a save outside any
context (a shell, your own code) is recorded with ``via="shell"``. Changes the cluster makes with a
conditional UPDATE (a pause after repeated failures) record the change themselves
(:func:`django_cluster_cron.models.changes.record_change`). Operator
actions that are not field changes (run now, backfill) are recorded as actions with a note.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any


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


def snapshot(values: Mapping[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """The ``fields`` of ``values`` that it holds, as JSON can hold them."""
    return {field: plain(values[field]) for field in fields if field in values}


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
