"""Django's tasks framework, wherever the project has it: ``django.tasks`` (Django 6.0 and newer)
and the ``django-tasks`` backport (``django_tasks``, for Django 5.2).

A job's task is a ``django.tasks`` task when its import path names an object made by ``@task``
(a ``Task``) of either. Both can be installed at once: on Django 6 some backends (django-tasks-rq)
still build their tasks with the backport's classes, so each task is handled with the framework
that made it.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any

from django.utils.module_loading import import_string

__all__ = [
    "Framework",
    "Refused",
    "Target",
    "available",
    "framework_of",
    "frameworks",
    "imported",
    "resolve_task",
    "target",
    "task_path",
    "task_paths",
    "task_signature",
]


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


def task_paths() -> list[str]:
    """The import paths of the ``django.tasks`` tasks in the installed apps' ``tasks`` modules
    (imported here, as Celery's autodiscovery imports them): what the admin offers a job. A
    task defined elsewhere is still a job's task by its path."""
    from django.apps import apps

    if not available():
        return []
    found = set()
    for config in apps.get_app_configs():
        name = f"{config.name}.tasks"
        try:
            if find_spec(name) is None:
                continue
            module = importlib.import_module(name)
        except Exception:  # a module that fails to import is no list of tasks
            continue
        for value in vars(module).values():
            path = task_path(value)
            if path is not None:
                found.add(path)
    return sorted(found)


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


def imported(path: str) -> tuple[Any, str]:
    """What ``path`` imports to, for saying why it is not a task: ``(the object, "")``, or
    ``(None, why)`` when it imports to nothing (the import's own error)."""
    try:
        return import_string(path), ""
    except ImportError as exc:
        return None, str(exc)
    except Exception as exc:  # whatever the module raises while importing
        return None, f"importing it raised {type(exc).__name__}: {exc}"


def task_signature(task: Any) -> inspect.Signature | None:
    """How a job's arguments reach a ``django.tasks`` task's function: its signature, less the
    context a task that takes one is given first. None if inspect cannot read it."""
    try:
        signature = inspect.signature(task.func)
    except (TypeError, ValueError):
        return None
    if task.takes_context:
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return signature


class Refused(Exception):
    """What a task's backend refuses of a job's use of it; ``field`` names the job's field it
    comes from (``task``, ``queue`` or ``priority``), ``code`` the kind of refusal."""

    def __init__(self, field: str, code: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.code = code


@dataclass(frozen=True)
class Target:
    """A ``django.tasks`` task a job names, with its framework and backend."""

    task: Any
    framework: Framework
    backend: Any

    def bind(self, task: Any, *, queue: str, priority: int | None, run_after: Any = None) -> Any:
        """``task`` (the job's own, or a wrapper enqueued for it) as it goes to this target's
        backend: in ``queue``, at ``priority`` (None: the job's task's own), after
        ``run_after``. The backend's rules are the one test of both, when a job is saved and
        when its run is enqueued: :class:`Refused` says which of them failed, and why."""
        alias = self.task.backend
        queues = getattr(self.backend, "queues", None)
        if queues and queue not in queues:
            raise Refused(
                "queue",
                "unknown_queue",
                f"Backend {alias!r} has no queue {queue!r} (it has: {', '.join(sorted(queues))}).",
            )
        chosen = self.task.priority if priority is None else priority
        try:
            return task.using(backend=alias, queue_name=queue, priority=chosen, run_after=run_after)
        except self.framework.invalid_task as exc:
            try:
                self.task.using(priority=chosen)
            except self.framework.invalid_task as refusal:
                raise Refused(
                    "priority",
                    "priority",
                    f"Backend {alias!r} refuses priority {chosen}: {refusal}",
                ) from exc
            raise Refused("task", "refused", f"Backend {alias!r} refuses it: {exc}") from exc


def target(path: str) -> Target | None:
    """The ``django.tasks`` task ``path`` names, with its framework and backend; None when the
    path names no such task; :class:`Refused` (field ``task``) when its backend is not
    configured."""
    task = resolve_task(path)
    framework = framework_of(task)  # None for None: resolve_task found no such task
    if task is None or framework is None:
        return None
    try:
        backend = framework.backend(task.backend)
    except framework.invalid_backend as exc:
        raise Refused("task", "backend", f"Its backend is not configured: {exc}") from exc
    return Target(task=task, framework=framework, backend=backend)
