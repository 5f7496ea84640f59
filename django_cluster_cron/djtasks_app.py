"""Django's tasks framework, wherever the project has it: ``django.tasks`` (Django 6.0 and newer)
and the ``django-tasks`` backport (``django_tasks``, for Django 5.2).

A job's task is a ``django.tasks`` task when its import path names an object made by ``@task``
(a ``Task``) of either. Both can be installed at once: on Django 6 some backends (django-tasks-rq)
still build their tasks with the backport's classes, so each task is handled with the framework
that made it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any

from django.utils.module_loading import import_string

__all__ = ["Framework", "available", "framework_of", "frameworks", "resolve_task", "task_path"]


@dataclass(frozen=True)
class Framework:
    """One tasks framework: its package and the names this app uses from it."""

    package: str  # "django.tasks" or "django_tasks"
    task_class: type
    task: Any  # the @task decorator
    backends: Any  # the backends' handler (task_backends)
    invalid_backend: type[Exception]
    invalid_task: type[Exception]

    def backend(self, alias: str) -> Any:
        return self.backends[alias]


_found: list[Framework] | None = None


def _load(package: str) -> Framework | None:
    try:
        if find_spec(package) is None:
            return None
    except (ImportError, ValueError):  # django.tasks: its parent django has no such module
        return None
    base = importlib.import_module(f"{package}.base")
    exceptions = importlib.import_module(f"{package}.exceptions")
    root = importlib.import_module(package)
    invalid_backend = getattr(exceptions, "InvalidTaskBackend", None)
    invalid_task = getattr(exceptions, "InvalidTask", None)
    # The backport's names (Django's own dropped the suffix).
    invalid_backend = invalid_backend or exceptions.InvalidTaskBackendError
    invalid_task = invalid_task or exceptions.InvalidTaskError
    return Framework(
        package=package,
        task_class=base.Task,
        task=base.task,
        backends=root.task_backends,
        invalid_backend=invalid_backend,
        invalid_task=invalid_task,
    )


def frameworks() -> list[Framework]:
    """The tasks frameworks installed, Django's own first."""
    global _found
    if _found is None:
        _found = [f for f in (_load("django.tasks"), _load("django_tasks")) if f is not None]
    return _found


def available() -> bool:
    return bool(frameworks())


def framework_of(candidate: object) -> Framework | None:
    """The framework whose ``Task`` ``candidate`` is, or None (not a django.tasks task)."""
    for framework in frameworks():
        if isinstance(candidate, framework.task_class):
            return framework
    return None


def task_path(candidate: object) -> str | None:
    """The import path a job names ``candidate`` by, if it is a ``django.tasks`` task."""
    if framework_of(candidate) is None:
        return None
    return str(candidate.module_path)  # type: ignore[attr-defined]


def resolve_task(path: str) -> Any | None:
    """The ``django.tasks`` task that ``path`` names (``"billing.tasks.send_invoices"``), or
    None when it names something else, or nothing that can be imported. Never raises for a bad
    path: a Celery task name need not be an import path."""
    if not available() or "." not in path:
        return None
    try:
        found = import_string(path)
    except Exception:  # ImportError, or whatever the module raises while importing
        return None
    return found if framework_of(found) is not None else None
