"""Reading ``CLUSTER_CRON["JOBS"]`` entry by entry: what cannot be read is reported on its entry
(by name, or by position when its key is no name), and the other entries are read on."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from ..core.interval import format_duration
from ..djtasks_app import task_path
from .declaration import (
    CODE_FIELDS,
    NOT_REMOVED,
    SETTINGS_ORIGIN,
    Declaration,
    DeclarationError,
    Rejected,
    values_of,
)

# What the "options" of a CELERY_BEAT_SCHEDULE-style entry may carry.
OPTION_FIELDS = ("queue", "priority", "expires")


def is_crontab(schedule: Any) -> bool:
    """Whether ``schedule`` is a celery ``crontab()`` (or made like one)."""
    return all(hasattr(schedule, f"_orig_{part}") for part in ("minute", "hour"))


def celery_zone(schedule: Any = None) -> tuple[str, str]:
    """The zone Celery runs a ``crontab()`` in, and where that comes from: its app's
    ``timezone`` (``CELERY_TIMEZONE`` in Django settings), else UTC, as Celery does."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    from ..celery_app import get_celery_app

    app = getattr(schedule, "_app", None)
    try:
        conf = (app or get_celery_app()).conf
    except ImproperlyConfigured:  # the checks say why (E006)
        zone, local = getattr(settings, "CELERY_TIMEZONE", None), False
    else:
        zone, local = conf.timezone, not conf.enable_utc
    if zone:
        name = str(getattr(zone, "key", zone))
        if not getattr(settings, "CELERY_TIMEZONE", None) and name == settings.TIME_ZONE:
            return name, "the Celery app's timezone: Django's TIME_ZONE, CELERY_TIMEZONE is not set"
        return name, "the Celery app's timezone, CELERY_TIMEZONE"
    if local:
        return "UTC", (
            "no timezone is set and enable_utc is off, so Celery used each host's local time: "
            "set the job's timezone if that was not UTC"
        )
    return "UTC", "no timezone is set (CELERY_TIMEZONE), so Celery's default"


def schedule_text(schedule: Any) -> str:
    """The schedule's text: a string as it is, a celery ``crontab()`` as the fields it was built
    with, a ``timedelta`` (or a celery ``schedule(run_every=...)``) of whole seconds as
    ``@every``."""
    if isinstance(schedule, str):
        return schedule
    if is_crontab(schedule):
        parts = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
        return " ".join(str(getattr(schedule, f"_orig_{part}")) for part in parts)
    every = getattr(schedule, "run_every", schedule)
    if isinstance(every, timedelta):
        if every < timedelta(seconds=1) or every % timedelta(seconds=1):
            raise DeclarationError(
                f"an interval of {every.total_seconds():g} s: intervals are whole seconds, "
                "at least 1",
                "schedule",
            )
        return f"@every {format_duration(every)}"
    raise DeclarationError(
        "'schedule' must be text ('0 3 * * *', '@every 90s', '@at 2026-12-24T18:00'), a celery "
        f"crontab() or a timedelta, not {type(schedule).__name__}",
        "schedule",
    )


def entry_values(entry: Any) -> dict[str, Any]:
    """The job fields of one settings entry; :class:`DeclarationError` if it cannot be read."""
    if not isinstance(entry, Mapping):
        raise DeclarationError(f"must be a dict of job fields, not {type(entry).__name__}")
    entry = dict(entry)
    allowed = ("schedule", "options", *CODE_FIELDS)
    for key in entry:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            values_of({key: None}, hint=f" (did you mean {close[0]!r}?)" if close else "")
    if "cron" in entry:
        raise DeclarationError(
            "'cron' is declared as 'schedule' here, e.g. 'schedule': '0 3 * * *'", "cron"
        )
    missing = [key for key in ("task", "schedule") if key not in entry]
    if missing:
        raise DeclarationError("needs at least 'task' and 'schedule'", missing[0])
    if is_crontab(entry["schedule"]) and "timezone" not in entry:
        # Celery runs a crontab() in its app's zone: so does the job, unless the entry says.
        entry["timezone"] = celery_zone(entry["schedule"])[0]
    entry["cron"] = schedule_text(entry.pop("schedule"))
    path = task_path(entry["task"])
    if path is not None:  # a django.tasks task given as itself: jobs name it by its path
        entry["task"] = path
    options = entry.pop("options", None) or {}
    if not isinstance(options, Mapping):
        raise DeclarationError("'options' must be a dict", "options")
    for key, value in options.items():
        if key not in OPTION_FIELDS:
            raise DeclarationError(
                f"option {key!r} is not supported (only {', '.join(OPTION_FIELDS)})", "options"
            )
        entry[key] = value
    return values_of(entry)


def from_settings() -> tuple[list[Declaration], list[Rejected], str]:
    """The entries that can be read, the ones that cannot, and why the settings say nothing of
    the jobs declared there ("" when they do: ``JOBS`` is set and is a dict)."""
    from ..conf import app_settings

    if "JOBS" not in app_settings.raw():
        # A settings module that does not set JOBS (a one-off one, for a command) does not say
        # that the jobs declared in the project's settings are gone.
        unknown = (
            f"declared in {SETTINGS_ORIGIN}, which these settings do not set: {NOT_REMOVED}. Set "
            "CLUSTER_CRON['JOBS'] (to {} if it declares none) for a sync to disable the jobs "
            "removed from it"
        )
        return [], [], unknown
    raw = app_settings.JOBS
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        problem = f"must be a dict of job name -> job fields, not {type(raw).__name__}"
        unknown = f"declared in {SETTINGS_ORIGIN}, which cannot be read: {NOT_REMOVED}"
        return (
            [],
            [Rejected(SETTINGS_ORIGIN, SETTINGS_ORIGIN, (("", problem),), unreadable=True)],
            unknown,
        )
    found: list[Declaration] = []
    rejected: list[Rejected] = []
    for index, (name, entry) in enumerate(raw.items()):
        if not isinstance(name, str) or not name.strip():
            problem = f"{name!r} is not a job name: the key must be a non-empty string"
            where = f"{SETTINGS_ORIGIN}, entry #{index + 1}"
            rejected.append(Rejected(f"#{index + 1}", where, (("name", problem),), unreadable=True))
            continue
        where = f"{SETTINGS_ORIGIN}[{name!r}]"
        try:
            found.append(Declaration(name=name, origin=where, values=entry_values(entry)))
        except DeclarationError as exc:
            rejected.append(Rejected(name, where, ((exc.field, exc.message),), unreadable=True))
    return found, rejected, ""
