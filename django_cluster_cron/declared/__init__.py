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

A celery ``crontab()`` runs in the zone Celery runs it in (its app's ``timezone``) unless the
entry names a ``timezone``; errors name the entry's keys (``schedule``, not the job's ``cron``).

A declaration is validated exactly like the admin's form (the model's ``full_clean()``). One that
is invalid or cannot be read is *left out*, never a reason to stop: :func:`collect` returns it as
:class:`Rejected` beside the valid ones, the system checks warn about it, the sync skips it (its
row, if an earlier release synced it, keeps what was synced then), and every other job goes on.
Jobs reach the database through :mod:`django_cluster_cron.declared.sync` (``manage.py
sync_jobs``, and after ``migrate``).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ..djtasks_app import task_path
from .declaration import (
    CODE_FIELDS,
    SETTINGS_ORIGIN,
    Declaration,
    DeclarationError,
    Declared,
    Rejected,
    problems_of,
    values_of,
)

__all__ = [
    "CODE_FIELDS",
    "SETTINGS_ORIGIN",
    "Declaration",
    "DeclarationError",
    "Declared",
    "Rejected",
    "collect",
    "cron",
    "declarations",
]

T = TypeVar("T")


# -- the decorator ------------------------------------------------------------------------------

_lock = threading.Lock()
# name -> origin -> what was declared there (a Rejected when it could not be read). Two origins
# for one name is a name declared twice. The same origin again (a module imported anew) replaces.
_decorated: dict[str, dict[str, Declaration | Rejected]] = {}


def cron(
    schedule: str,
    *,
    name: str | None = None,
    timezone: str = "UTC",
    args: Iterable[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **fields: Any,
) -> Callable[[T], T]:
    """Declare a job that runs this task on ``schedule``: a cron expression of our dialect,
    ``@every <duration>`` or ``@at <date and time>`` (docs/reference/schedules.md).

    Put it above ``@shared_task``/``@app.task`` (it reads the task's registered name), above
    ``django.tasks``' ``@task`` (it reads the task's import path), or above a plain function that
    a task decorator turns into ``module.function``. ``name`` defaults to the
    task's name. Other keywords are job fields: ``max_retries``, ``queue``, ``catchup_policy``...
    A keyword that is no job field does not break the module's import: the job is left out and
    the system checks and ``sync_jobs`` say why.
    """

    def register(target: T) -> T:
        task_name = task_path(target) or getattr(target, "name", None) or _default_task_name(target)
        origin = _origin(target)
        job_name = name or task_name
        declared: Declaration | Rejected
        try:
            values = values_of(
                {
                    "cron": schedule,
                    "timezone": timezone,
                    "task": task_name,
                    "args": list(args),
                    "kwargs": dict(kwargs or {}),
                    **fields,
                }
            )
            declared = Declaration(name=job_name, origin=origin, values=values)
        except DeclarationError as exc:
            declared = Rejected(job_name, origin, ((exc.field, exc.message),), unreadable=True)
        with _lock:
            _decorated.setdefault(job_name, {})[origin] = declared
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


# -- all of them --------------------------------------------------------------------------------


def collect(*, import_tasks: bool = True) -> Declared:
    """Every declaration, settings and decorators, each checked as the admin checks a job: the
    valid ones (sorted by name) and the ones left out, with why. Never raises for a bad
    declaration: one typo must not stop the other jobs."""
    from .reading import from_settings

    if import_tasks:
        from ..celery_app import import_task_modules

        import_task_modules()
    found, rejected, settings_unknown = from_settings()
    rejected = list(rejected)
    in_settings = {d.name: d.origin for d in found} | {r.name: r.origin for r in rejected}
    with _lock:
        decorated = {job: dict(by_origin) for job, by_origin in _decorated.items()}
    candidates = list(found)
    for job_name, by_origin in decorated.items():
        origins = sorted(by_origin)
        if job_name in in_settings:
            origins.insert(0, in_settings[job_name])
            candidates = [d for d in candidates if d.name != job_name]
            rejected = [r for r in rejected if r.name != job_name]
        if len(origins) > 1:
            where = " and ".join(origins)
            twice = f"declared {len(origins)} times: at {where}; keep one"
            rejected.append(Rejected(job_name, origins[0], (("name", twice),), unreadable=True))
            continue
        [declared] = by_origin.values()
        if isinstance(declared, Rejected):
            rejected.append(declared)
        else:
            candidates.append(declared)
    result = Declared(settings_unknown=settings_unknown)
    for declaration in candidates:
        errors = declaration.errors()
        if errors:
            rejected.append(Rejected(declaration.name, declaration.origin, problems_of(errors)))
        else:
            result.valid.append(declaration)
    result.valid.sort(key=lambda d: d.name)
    result.rejected = sorted(rejected, key=lambda r: (r.name, r.origin))
    return result


def declarations(*, import_tasks: bool = True) -> list[Declaration]:
    """The valid declarations, sorted by name (see :func:`collect` for the ones left out)."""
    return collect(import_tasks=import_tasks).valid


def forget_decorated() -> None:
    """Drop every ``@cron`` registration (tests)."""
    with _lock:
        _decorated.clear()
