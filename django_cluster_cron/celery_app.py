"""Finding the project's Celery app, the task names it knows (and how each is called), and the
ones no job may use."""

from __future__ import annotations

import inspect
import threading
from typing import TYPE_CHECKING, Any, cast

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .conf import app_settings

if TYPE_CHECKING:
    from celery import Celery

# Tasks no job may schedule, with why. The app's own ``execute_run`` is what runs a job: a job
# that scheduled it would call it without a run to execute, and nothing would run.
PRIVATE_TASK_PREFIXES = {
    "celery.": "one of Celery's internal tasks",
    "django_cluster_cron.": (
        "one of django-cluster-cron's own tasks (it executes the runs of jobs; a job cannot "
        "schedule it)"
    ),
}


def private_task_reason(name: str) -> str | None:
    """Why ``name`` may not be a job's task (Celery's or this app's own), or None."""
    for prefix, reason in PRIVATE_TASK_PREFIXES.items():
        if name.startswith(prefix):
            return f"{name!r} is {reason} and cannot be scheduled."
    return None


_imported: set[int] = set()
_import_lock = threading.Lock()


def get_celery_app() -> Celery:
    """The Celery app named by ``CLUSTER_CRON['CELERY_APP']``, else ``celery.current_app``."""
    # Celery is imported here, not with this module: the models (through validation) import this
    # module, and a process that only reads jobs should not load Celery for it.
    from celery import Celery

    path = app_settings.CELERY_APP
    if path is None:
        from celery import current_app

        # Unwrap the proxy: callers cache per app object.
        return cast(Celery, current_app._get_current_object())  # type: ignore[attr-defined]
    dotted = path.replace(":", ".")
    try:
        candidate = import_string(dotted)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"CLUSTER_CRON['CELERY_APP'] is {path!r}, which cannot be imported: {exc}"
        ) from exc
    if not isinstance(candidate, Celery):
        raise ImproperlyConfigured(
            f"CLUSTER_CRON['CELERY_APP'] is {path!r}, which is a "
            f"{type(candidate).__name__}, not a Celery app."
        )
    return candidate


# What celery.current_app is named while no project app has been made: Celery's default app.
DEFAULT_APP_NAMES = (None, "__main__", "default")


def configured(app: Celery) -> bool:
    """Whether ``app`` (from :func:`get_celery_app`) is one the project configured: named by
    ``CELERY_APP``, or a current app of its own, not Celery's default app. A project with none
    is told so, rather than how many tasks Celery's default app has."""
    return app_settings.CELERY_APP is not None or app.main not in DEFAULT_APP_NAMES


def registered_name(candidate: object) -> str | None:
    """The name a Celery task object is registered by, or None if ``candidate`` is none."""
    from celery import Task

    return str(candidate.name) if isinstance(candidate, Task) else None


def task_signature(app: Celery, name: str) -> inspect.Signature | None:
    """How a job's arguments reach the registered task ``name``: the signature of its ``run``
    (a bound task's without ``self``). None when that cannot be told: the task is not
    registered, Celery's own argument check is off for it (``typing=False``), or inspect cannot
    read it."""
    registered_task_names(app)  # its modules imported, as a worker's are
    task: Any = app.tasks.get(name)
    if task is None or task.typing is False:
        return None
    try:
        return inspect.signature(task.run)
    except (TypeError, ValueError):
        return None


def registered_task_names(app: Celery | None = None) -> list[str]:
    """Names of the tasks a job may use: registered in the app, neither Celery's own
    (``celery.*``) nor this app's (``django_cluster_cron.*``).

    Like a worker, first imports the modules the app autodiscovers (``tasks.py`` of installed
    apps), so a web process sees the same tasks a worker does.
    """
    app = app or get_celery_app()
    key = id(app)
    if key not in _imported:
        with _import_lock:
            if key not in _imported:
                import_task_modules(app)
                _imported.add(key)
    return sorted(
        name for name in app.tasks if not name.startswith("_") and not private_task_reason(name)
    )


def import_task_modules(app: Celery | None = None) -> None:
    """Import the task modules a worker would: ``<app>.tasks`` of every installed Django app
    (Celery's autodiscovery) and the app's ``imports`` and ``include``.

    Not Celery's own ``loader.import_default_modules()``: under Django its fixup runs the system
    checks from there, and the checks validate jobs, which list the registered tasks: a loop.
    """
    import importlib
    import importlib.util

    from django.apps import apps

    conf = (app or get_celery_app()).conf
    names = [f"{config.name}.tasks" for config in apps.get_app_configs()]
    names += [*(conf.imports or ()), *(conf.include or ())]
    for name in names:
        try:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
        except ModuleNotFoundError:  # a parent package that does not exist
            continue


# Celery's worker pools by the module that implements each (what ``-P`` names them), and those
# that can stop a running task from outside (``revoke(terminate=True)``): a prefork pool signals
# the pool process, eventlet and gevent kill the green thread; solo and threads cannot.
POOLS = {
    "prefork": "prefork",
    "thread": "threads",
    "solo": "solo",
    "eventlet": "eventlet",
    "gevent": "gevent",
}
TERMINABLE_POOLS = ("prefork", "eventlet", "gevent")
POOL_ALIASES = {"processes": "prefork", "threads": "threads"}


def pool_name(pool: object) -> str:
    """A worker's pool as ``-P`` names it (``custom`` for one of the project's own), from its
    class, or from the name a configuration gives (``worker_pool``)."""
    if isinstance(pool, str):
        name = pool.strip().lower()
        name = POOL_ALIASES.get(name, name)
        return name if name in POOLS.values() else "custom"
    module = str(getattr(pool, "__module__", ""))
    if not module.startswith("celery.concurrency."):
        return "custom"
    return POOLS.get(module.rpartition(".")[2], "custom")


def terminate_refusal(pool: str) -> str | None:
    """Why a run on a worker with this pool cannot be terminated, or None if it can."""
    if pool in TERMINABLE_POOLS:
        return None
    if pool == "django.tasks":
        return (
            "a django.tasks backend cannot stop a running task (it has no cancel); the body "
            "must stop by itself when it sees the cancel"
        )
    shown = f"Celery's {pool} pool" if pool else "its worker"
    return (
        f"{shown} cannot terminate a running task (Celery terminates on the prefork, eventlet "
        "and gevent pools only); the body must stop by itself when it sees the cancel"
    )
