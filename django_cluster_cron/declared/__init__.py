"""Jobs declared in code, reviewed in pull requests like the rest of the project.

Two ways, which may be mixed:

* next to the task, with the :func:`cron` decorator::

      from celery import shared_task
      from django_cluster_cron.declared import cron

      @cron("0 3 * * *", timezone="Europe/Berlin", max_retries=2)
      @shared_task(name="reports.nightly")
      def nightly_report(): ...

* in settings, in the shape ``CELERY_BEAT_SCHEDULE`` users know::

      CLUSTER_CRON = {"JOBS": {
          "nightly-report": {
              "task": "reports.nightly",
              "schedule": "0 3 * * *",          # a cron string, or a celery crontab()
              "timezone": "Europe/Berlin",
              "args": [], "kwargs": {},
              "options": {"queue": "reports"},  # queue, priority, expires
              "max_retries": 2,                 # any other job field
          },
      }}

A declaration is validated exactly like the admin's form (the model's ``full_clean()``); the
system checks report its errors at ``manage.py check`` with the job's name and the field. Jobs
reach the database through :mod:`django_cluster_cron.declared.sync` (``manage.py sync_jobs``, and
after ``migrate``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from ..models.fields import DEFINITION_FIELDS

__all__ = ["CODE_FIELDS", "Declaration", "DeclarationError", "cron", "declarations"]

# The fields code owns (the model's DEFINITION_FIELDS): the admin shows them read-only on a
# declared job. Operators keep enabled/pause_note (pause, resume) and the actions.
CODE_FIELDS = DEFINITION_FIELDS
# What the "options" of a CELERY_BEAT_SCHEDULE-style entry may carry.
OPTION_FIELDS = ("queue", "priority", "expires")
SETTINGS_ORIGIN = "settings CLUSTER_CRON['JOBS']"

T = TypeVar("T")


class DeclarationError(Exception):
    """A declaration that cannot even be read (an unknown key, a schedule of the wrong type)."""


@dataclass(frozen=True)
class Declaration:
    """One job as code declares it: its name, the fields code owns, and where it was written."""

    name: str
    origin: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def job(self) -> Any:
        """An unsaved JobDefinition with these values (the model's defaults for the rest)."""
        from ..models import JobDefinition

        return JobDefinition(name=self.name, **dict(self.values))

    def errors(self) -> dict[str, list[str]]:
        """What ``full_clean()`` says of it, per field (empty when valid)."""
        from django.core.exceptions import ValidationError

        job = self.job()
        # The live-name uniqueness is sync's business (a declared job updates its own row), and
        # this runs at `manage.py check`, maybe before the tables exist.
        job.check_name_in_database = False
        try:
            job.full_clean(validate_constraints=False)
        except ValidationError as exc:
            return dict(exc.message_dict)
        return {}

    def digest(self) -> str:
        return hashlib.sha256(_canonical({"name": self.name, **self.values}).encode()).hexdigest()


def _canonical(value: Any) -> str:
    def default(obj: Any) -> Any:
        if isinstance(obj, timedelta):
            return obj.total_seconds()
        return str(obj)

    return json.dumps(value, sort_keys=True, default=default)


# -- the decorator ------------------------------------------------------------------------------

_lock = threading.Lock()
_decorated: dict[str, Declaration] = {}
_duplicates: list[str] = []


def cron(
    schedule: str,
    *,
    name: str | None = None,
    timezone: str = "UTC",
    args: Iterable[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **fields: Any,
) -> Callable[[T], T]:
    """Declare a job that runs this task on ``schedule`` (a cron expression of our dialect).

    Put it above ``@shared_task``/``@app.task`` (it reads the task's registered name), or above a
    plain function that a task decorator turns into ``module.function``. ``name`` defaults to the
    task's name. Other keywords are job fields: ``max_retries``, ``queue``, ``catchup_policy``...
    """

    def register(target: T) -> T:
        task_name = getattr(target, "name", None) or _default_task_name(target)
        origin = _origin(target)
        values = _values(
            {
                "cron": schedule,
                "timezone": timezone,
                "task": task_name,
                "args": list(args),
                "kwargs": dict(kwargs or {}),
                **fields,
            },
            f"@cron on {task_name} ({origin})",
        )
        declaration = Declaration(name=name or task_name, origin=origin, values=values)
        with _lock:
            previous = _decorated.get(declaration.name)
            if previous is not None and previous.origin != origin:
                _duplicates.append(
                    f"job {declaration.name!r} is declared twice: at {previous.origin} and {origin}"
                )
            _decorated[declaration.name] = declaration
        return target

    return register


def _default_task_name(target: Any) -> str:
    function = getattr(target, "run", target)
    return f"{function.__module__}.{function.__qualname__}"


def _origin(target: Any) -> str:
    function = inspect.unwrap(getattr(target, "run", target))
    try:
        line = inspect.getsourcelines(function)[1]
    except (OSError, TypeError):
        line = 0
    module = getattr(function, "__module__", "?")
    return f"{module}:{line}" if line else module


# -- settings -----------------------------------------------------------------------------------


def schedule_text(schedule: Any, where: str) -> str:
    """A cron string, or one from a celery ``crontab()`` (the fields it was built with)."""
    if isinstance(schedule, str):
        return schedule
    if all(hasattr(schedule, f"_orig_{part}") for part in ("minute", "hour")):
        parts = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
        return " ".join(str(getattr(schedule, f"_orig_{part}")) for part in parts)
    raise DeclarationError(
        f"{where}: 'schedule' must be a cron expression such as '0 3 * * *' (or a celery "
        f"crontab()), not {type(schedule).__name__}; intervals: see import_celery_beat "
        "--from-settings"
    )


def _values(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    from ..models import JobDefinition

    known = {f.name for f in JobDefinition._meta.get_fields()}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in CODE_FIELDS:
            hint = (
                "operators own it (pause and resume in the admin or the API)"
                if key in known
                else "not a job field"
            )
            raise DeclarationError(f"{where}: {key!r} cannot be declared: {hint}")
        values[key] = value
    window = values.get("catchup_window")
    if isinstance(window, (int, float)) and not isinstance(window, bool):
        values["catchup_window"] = timedelta(seconds=window)
    return values


def from_settings() -> list[Declaration]:
    from ..conf import app_settings

    found = []
    for name, entry in (app_settings.JOBS or {}).items():
        where = f"{SETTINGS_ORIGIN}[{name!r}]"
        if not isinstance(entry, Mapping):
            raise DeclarationError(f"{where}: must be a dict of job fields")
        entry = dict(entry)
        if "schedule" not in entry or "task" not in entry:
            raise DeclarationError(f"{where}: needs at least 'task' and 'schedule'")
        entry["cron"] = schedule_text(entry.pop("schedule"), where)
        options = entry.pop("options", None) or {}
        if not isinstance(options, Mapping):
            raise DeclarationError(f"{where}: 'options' must be a dict")
        for key, value in options.items():
            if key not in OPTION_FIELDS:
                raise DeclarationError(
                    f"{where}: option {key!r} is not supported (only {', '.join(OPTION_FIELDS)})"
                )
            entry[key] = value
        found.append(Declaration(name=str(name), origin=where, values=_values(entry, where)))
    return found


def declarations(*, import_tasks: bool = True) -> list[Declaration]:
    """Every declared job: settings, then decorators (sorted by name). Raises
    :class:`DeclarationError` for a declaration that cannot be read or a name declared twice."""
    if import_tasks:
        from ..celery_app import import_task_modules

        import_task_modules()
    found = from_settings()
    names = {d.name for d in found}
    with _lock:
        if _duplicates:
            raise DeclarationError(_duplicates[0])
        for declaration in _decorated.values():
            if declaration.name in names:
                raise DeclarationError(
                    f"job {declaration.name!r} is declared twice: in {SETTINGS_ORIGIN} and at "
                    f"{declaration.origin}"
                )
            found.append(declaration)
    return sorted(found, key=lambda d: d.name)


def forget_decorated() -> None:
    """Drop every ``@cron`` registration (tests)."""
    with _lock:
        _decorated.clear()
        _duplicates.clear()
