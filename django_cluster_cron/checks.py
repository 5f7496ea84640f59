"""System checks with stable ids (``cluster_cron.E001`` …) for bad settings.

A bad job declared in code is a warning, not an error: an error stops every command that runs
the checks (run_scheduler, migrate, sync_jobs), so one typo would stop every job. The sync leaves
that declaration out and syncs the others.

| id                    | problem                                                            |
|-----------------------|--------------------------------------------------------------------|
| cluster_cron.E001     | ``CLUSTER_CRON`` is not a dict                                     |
| cluster_cron.W001     | ``CLUSTER_CRON`` has a key the app does not know (a typo?)         |
| cluster_cron.E002     | a setting has a value of the wrong type or range                   |
| cluster_cron.E003     | ``RENEW_INTERVAL`` is not below half the ``LEASE_TTL``             |
| cluster_cron.E004     | Redis lease: ``REDIS_ALIAS`` names no entry of ``CACHES``           |
| cluster_cron.E005     | Redis lease: the ``REDIS_ALIAS`` cache is not a django-redis cache |
| cluster_cron.E008     | Redis lease: redis-py or django-redis is not installed (an extra)  |
| cluster_cron.W003     | ``LEASE_BACKEND`` is ``"memory"``: leases exclude one process only |
| cluster_cron.W004     | a job declared in code cannot be read (unknown key, twice declared) |
| cluster_cron.W005     | a job declared in code is invalid (the field and the model's words)|
| cluster_cron.E006     | ``CELERY_APP`` cannot be imported or is not a Celery app           |
| cluster_cron.W002     | no Celery app is configured (``celery.current_app`` is the default), |
|                       | and the project sets no ``TASKS`` (Django's tasks)                 |
| cluster_cron.E007     | ``USE_TZ`` is False                                                |
| cluster_cron.W006     | a database the app uses waits without bound on a silent link      |
| cluster_cron.W007     | Redis lease: its connections would wait on Redis without bound     |
| cluster_cron.W008     | the REST API is mounted and no ``TASK_ALLOWLIST`` is set           |
| cluster_cron.W009     | the Celery app sends or accepts pickle or YAML messages            |
| cluster_cron.W010     | PostgreSQL is reached through a transaction-mode pooler (PgBouncer) |

The app config's ``ready()`` registers the checks of this module with Django, each under its
tag (importing the module registers nothing).

W006 and W007 are ordinary checks: ``manage.py check`` shows them, and so does every command that
runs the checks, ``run_scheduler`` included (a scheduler is where an unbounded wait stops the
cluster); ``SILENCED_SYSTEM_CHECKS`` silences them everywhere at once.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.core.exceptions import ImproperlyConfigured

from .conf import DEFAULTS, SETTINGS_NAME, app_settings
from .dbconn import TIMEOUT_OPTIONS, behind_transaction_pooler
from .leases import backend_name, is_django_redis_alias

DJANGO_REDIS_BACKEND = "django_redis.cache.RedisCache"


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = getattr(settings, SETTINGS_NAME, {})
    if not isinstance(raw, Mapping):
        return [
            Error(
                f"settings.{SETTINGS_NAME} must be a dict, not {type(raw).__name__}.",
                id="cluster_cron.E001",
            )
        ]
    messages: list[CheckMessage] = []
    for key in raw:
        if key not in DEFAULTS:
            # Keys are upper case: 'redis_alias' is REDIS_ALIAS mistyped, not an unknown key.
            upper = str(key).upper()
            close = (
                [upper] if upper in DEFAULTS else difflib.get_close_matches(upper, DEFAULTS, n=1)
            )
            messages.append(
                Warning(
                    f"settings.{SETTINGS_NAME} has an unknown key {key!r}.",
                    hint=f"Did you mean {close[0]!r}?" if close else "See the settings reference.",
                    id="cluster_cron.W001",
                )
            )
    bad: set[str] = set()
    for name in DEFAULTS:
        try:
            app_settings.get(name)
        except ImproperlyConfigured as exc:
            bad.add(name)
            messages.append(Error(str(exc), id="cluster_cron.E002"))
    if not bad & {"LEASE_TTL", "RENEW_INTERVAL"}:
        ttl, renew = app_settings.LEASE_TTL, app_settings.RENEW_INTERVAL
        if renew >= ttl / 2:
            messages.append(
                Error(
                    f"{SETTINGS_NAME}['RENEW_INTERVAL'] is {renew:g} s but LEASE_TTL is {ttl:g} s: "
                    "the lease could expire before a second renewal attempt.",
                    hint="Leave RENEW_INTERVAL unset (LEASE_TTL / 3) or make it < LEASE_TTL / 2.",
                    id="cluster_cron.E003",
                )
            )
    if not bad & {"REDIS_ALIAS", "LEASE_BACKEND"}:
        backend = backend_name()
        if backend == "redis":
            messages.extend(
                _check_redis_installed() or _check_redis_alias(app_settings.REDIS_ALIAS)
            )
        elif backend == "memory":
            messages.append(
                Warning(
                    f"{SETTINGS_NAME}['LEASE_BACKEND'] is 'memory': leases and cluster locks "
                    "exclude the threads of one process only, not other hosts.",
                    hint="Meant for tests. Use 'redis' or 'database' anywhere two processes run.",
                    id="cluster_cron.W003",
                )
            )
    if "CELERY_APP" not in bad:
        messages.extend(_check_celery_app())
        if "JOBS" not in bad and not any(m.id == "cluster_cron.E006" for m in messages):
            messages.extend(_check_declarations())
    if not settings.USE_TZ:
        messages.append(
            Error(
                "django-cluster-cron needs USE_TZ = True: slots are instants in UTC.",
                id="cluster_cron.E007",
            )
        )
    return messages


def _check_redis_installed() -> list[CheckMessage]:
    missing = []
    for name in ("redis", "django_redis"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if not missing:
        return []
    return [
        Error(
            f"The Redis lease needs {' and '.join(missing)}, not installed here: Redis is an "
            "optional extra of django-cluster-cron.",
            hint="pip install 'django-cluster-cron[redis]', or keep leases in the database: "
            "LEASE_BACKEND = 'database'.",
            id="cluster_cron.E008",
        )
    ]


def _check_redis_alias(alias: str) -> list[CheckMessage]:
    caches = getattr(settings, "CACHES", {})
    if alias not in caches:
        return [
            Error(
                f"{SETTINGS_NAME}['REDIS_ALIAS'] is {alias!r} but CACHES has no such alias "
                f"(it has: {', '.join(map(repr, caches)) or 'none'}).",
                hint="Add a django-redis cache under that alias, point REDIS_ALIAS at one, or "
                "keep leases in the database: LEASE_BACKEND = 'database'.",
                id="cluster_cron.E004",
            )
        ]
    backend = caches[alias].get("BACKEND", "")
    is_django_redis = is_django_redis_alias(alias)
    if not is_django_redis:
        return [
            Error(
                f"CACHES[{alias!r}] uses {backend!r}, which is not a django-redis cache; the "
                "Redis lease needs django_redis.get_redis_connection().",
                hint=f"Set its BACKEND to {DJANGO_REDIS_BACKEND!r} (Django's built-in "
                "RedisCache is a different backend), or keep leases in the database: "
                "LEASE_BACKEND = 'database'.",
                id="cluster_cron.E005",
            )
        ]
    return []


def _check_celery_app() -> list[CheckMessage]:
    from .celery_app import get_celery_app

    try:
        app = get_celery_app()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="cluster_cron.E006")]
    if app_settings.CELERY_APP is None and app.main in (None, "__main__", "default"):
        if _sets_tasks():
            return []  # a project on Django's tasks framework, which may not use Celery at all
        return [
            Warning(
                "No Celery app is configured: celery.current_app is Celery's default app.",
                hint=f"Set {SETTINGS_NAME}['CELERY_APP'] = 'yourproject.celery:app', or import "
                "your app in your project's __init__.py as Celery's Django guide shows.",
                id="cluster_cron.W002",
            )
        ]
    return []


def _sets_tasks() -> bool:
    """Whether the project configures Django's tasks framework (``TASKS``, not Django's
    default)."""
    from django.conf import global_settings

    found = getattr(settings, "TASKS", None)
    return bool(found) and found is not getattr(global_settings, "TASKS", None)


# Set while a command that reports every declaration it leaves out runs its checks (sync_jobs).
_declarations_reported = ContextVar("declarations_reported", default=False)


@contextmanager
def declarations_reported_by_the_command() -> Iterator[None]:
    """The checks run inside leave W004/W005 out: the command says each of them itself."""
    token = _declarations_reported.set(True)
    try:
        yield
    finally:
        _declarations_reported.reset(token)


def _check_declarations() -> list[CheckMessage]:
    """Jobs declared in code, validated as the admin validates a job: a warning per problem
    (W004 if the declaration cannot be read, W005 per invalid field), naming the job, where it
    is declared and the field. Warnings: the sync leaves the job out and the others run."""
    from .declared import collect

    if _declarations_reported.get():
        return []

    hint = (
        "Fix the declaration. Until then sync_jobs leaves this job out (a job synced before "
        "keeps its last synced definition); the others are synced."
    )
    found: list[CheckMessage] = []
    for rejected in collect().rejected:
        for field_name, problem in rejected.problems:
            text = f"Declared job {rejected.name!r} ({rejected.origin}): " + (
                f"{field_name}: {problem}" if field_name else problem
            )
            if rejected.unreadable:
                found.append(Warning(text, hint=hint, id="cluster_cron.W004"))
            else:
                found.append(Warning(text, hint=hint, id="cluster_cron.W005"))
    return found


# A project's DATABASES entries should bound a wait on a silent link (a firewall dropping packets,
# a cut cable) as the app's own connections do (dbconn.TIMEOUT_OPTIONS), so that a scheduler
# blocked there gives up and another node leads; and django-redis its sockets, for the Redis lease.
# On MySQL/MariaDB the read and write timeouts bound every statement of the project, not only a
# silent link: leave room for long ones (a migration of a big table).
PROJECT_OVERRIDES: dict[str, dict[str, int]] = {"mysql": {"read_timeout": 60, "write_timeout": 60}}
RECOMMENDED_REDIS_OPTIONS = {"SOCKET_CONNECT_TIMEOUT": 5, "SOCKET_TIMEOUT": 5}


def _redis_lease_waits_unbounded(alias: str) -> bool:
    """Whether the Redis lease's connections would wait without bound (see
    :func:`django_cluster_cron.leases.redis.bounded`: a plain pool gets timeouts added)."""
    from django_redis import get_redis_connection

    from .leases.redis import bounded, waits_unbounded

    try:
        client = get_redis_connection(alias)
    except Exception:  # a broken cache configuration: Django and django-redis report it
        return False
    return waits_unbounded(bounded(client))


def check_network_timeouts(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W006 per database entry, W007 for the Redis lease's cache, that lacks the options bounding
    a wait on a silent link."""
    found: list[CheckMessage] = []
    for alias, entry in settings.DATABASES.items():
        engine = str(entry.get("ENGINE", ""))
        vendor = next((v for v in TIMEOUT_OPTIONS if engine.endswith(v)), None)
        if vendor is None:
            continue
        options = entry.get("OPTIONS") or {}
        wanted = {**TIMEOUT_OPTIONS[vendor], **PROJECT_OVERRIDES.get(vendor, {})}
        missing = {k: v for k, v in wanted.items() if k not in options}
        if missing:
            found.append(
                Warning(
                    f"DATABASES[{alias!r}] sets no {', '.join(missing)}: a scheduler whose link "
                    "to the database goes silent waits until the operating system gives up "
                    "(many minutes) instead of failing and letting another node lead.",
                    hint=f"Add to DATABASES[{alias!r}]['OPTIONS']: {missing!r}.",
                    id="cluster_cron.W006",
                )
            )
    if backend_name() == "redis" and is_django_redis_alias(app_settings.REDIS_ALIAS):
        alias = app_settings.REDIS_ALIAS
        if _redis_lease_waits_unbounded(alias):
            found.append(
                Warning(
                    f"CACHES[{alias!r}] (the Redis lease) sets no socket timeout, and its "
                    "connection pool is not one the lease can copy with timeouts added (a "
                    "Sentinel or custom pool, with redis-py before 8): a scheduler whose link "
                    "to Redis goes silent blocks on it instead of giving up the lease.",
                    hint=f"Add to CACHES[{alias!r}]['OPTIONS']: {RECOMMENDED_REDIS_OPTIONS!r}.",
                    id="cluster_cron.W007",
                )
            )
    return found


def check_task_allowlist(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W008: whoever may add a job through the API chooses a task and its arguments; without an
    allowlist that is any task of the project."""
    if app_settings.TASK_ALLOWLIST is not None:
        return []
    from django.urls import NoReverseMatch, reverse

    try:
        reverse("cluster_cron_api:job-list")
    except NoReverseMatch:
        return []  # the API is not mounted
    except Exception:  # a broken URLconf: Django's own checks report it
        return []
    return [
        Warning(
            "The REST API is mounted and CLUSTER_CRON['TASK_ALLOWLIST'] is not set: whoever may "
            "add or change a job through it runs any task of the project (a registered Celery "
            "task, a django.tasks task by its path) with arguments of their choice.",
            hint="Set CLUSTER_CRON['TASK_ALLOWLIST'] to the task name patterns jobs may use, "
            "e.g. ['billing.tasks.*', 'reports.tasks.*'].",
            id="cluster_cron.W008",
        )
    ]


# Serializers that turn a message into code: whoever can write to the broker runs it.
UNSAFE_SERIALIZERS = frozenset(
    {"pickle", "yaml", "application/x-python-serialize", "application/x-yaml"}
)


def check_serializers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W009: job messages carry JSON; a Celery app that also accepts pickle or YAML runs what
    anyone able to write to the broker sends."""
    from .celery_app import get_celery_app

    try:
        conf = get_celery_app().conf
    except ImproperlyConfigured:
        return []  # E006 says why
    named = {
        "accept_content": conf.accept_content,
        "task_serializer": conf.task_serializer,
        "result_accept_content": conf.result_accept_content,
        "result_serializer": conf.result_serializer,
    }
    unsafe = {}
    for setting, value in named.items():
        values = [value] if isinstance(value, str) else list(value or ())
        found = sorted({str(v) for v in values if str(v).lower() in UNSAFE_SERIALIZERS})
        if found:
            unsafe[setting] = found
    if not unsafe:
        return []
    listed = "; ".join(f"{setting}: {', '.join(found)}" for setting, found in unsafe.items())
    return [
        Warning(
            f"The Celery app sends or accepts messages that can run code ({listed}): anyone "
            "who can write to the broker runs code in every worker. Job messages are JSON.",
            hint="Use JSON: CELERY_ACCEPT_CONTENT = ['json'], CELERY_TASK_SERIALIZER = 'json' "
            "(and the same for results).",
            id="cluster_cron.W009",
        )
    ]


def check_pooler(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """W010: a database the checks may touch (``check --database``, ``migrate``) is PostgreSQL
    reached through a transaction-mode pooler, where sessions do not last (what falls back)."""
    found: list[CheckMessage] = []
    for alias in databases or ():
        if behind_transaction_pooler(alias):
            found.append(
                Warning(
                    f"DATABASES[{alias!r}] reaches PostgreSQL through a transaction-mode pooler "
                    "(PgBouncer): the database lease's session witness and the change channel "
                    "(LISTEN) cannot work through it. Failover falls back to the lease TTL, and "
                    "schedulers see job changes at their next poll (POLL_INTERVAL).",
                    hint="Give the schedulers a DATABASES entry that reaches PostgreSQL directly "
                    "or through a session-mode pool; the workers and the web may keep the pooler.",
                    id="cluster_cron.W010",
                )
            )
    return found
