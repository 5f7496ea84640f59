"""Django settings for the test suite (``DJANGO_SETTINGS_MODULE=tests.settings``).

Services come from the environment, so the same settings serve a laptop, CI and the
subprocesses (schedulers, Celery workers) that the tests in tests/cluster start:

``DATABASE_URL``
    Any URL dj-database-url understands. Default: SQLite. For PostgreSQL use e.g.
    ``postgres://postgres@127.0.0.1:5432/test``, for MySQL/MariaDB
    ``mysql://root@127.0.0.1:3306/test`` (needs the ``mysql`` extra: mysqlclient); pytest-django
    then creates and drops ``test_<name>_<pid>`` (``TEST_DB_NAME`` overrides) so concurrent runs
    never collide.
``REDIS_URL``
    Point the suite at a real Redis server, e.g. ``redis://127.0.0.1:6379/15``. The suite
    FLUSHES that database, so never use one that holds data you care about. When unset,
    ``tests/conftest.py`` starts a throwaway server (scripts/devredis.py) before anything
    connects, writes its URL into ``CACHES`` and ``CELERY_BROKER_URL`` below, and exports
    ``REDIS_URL`` for child processes. Outside pytest (``make check``, mypy) the placeholder
    below is used: it refuses connections at once and never reaches a shared server.
``CELERY_BROKER_URL``
    Overrides the broker (default: the Redis URL above).
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent

# Port 1 is never a Redis server: anything that connects before the harness has chosen a server
# fails fast instead of touching the machine's shared Redis on 6379.
REDIS_PLACEHOLDER_URL = "redis://127.0.0.1:1/0"
REDIS_URL = os.environ.get("REDIS_URL") or REDIS_PLACEHOLDER_URL

SECRET_KEY = "tests-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

USE_TZ = True
TIME_ZONE = "UTC"
USE_I18N = True
LANGUAGE_CODE = "en-us"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_cluster_cron",
    "rest_framework",  # the api extra
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "tests.testapp",
]
# Only to test import_celery_beat; django-celery-beat is not installable beside every Django we
# test (2.9 requires Django < 6.1), and those tests skip without it.
HAS_CELERY_BEAT = importlib.util.find_spec("django_celery_beat") is not None
if HAS_CELERY_BEAT:
    INSTALLED_APPS.insert(-1, "django_celery_beat")

# Django's tasks framework (Django 6's own, or the django-tasks backport on Django 5.2) with
# django-tasks-db: jobs whose task is a django.tasks task run on a database backend's db_worker.
HAS_DJANGO_TASKS = importlib.util.find_spec("django_tasks_db") is not None
TASKS_PACKAGE = "django.tasks"
try:
    if importlib.util.find_spec("django.tasks") is None:
        TASKS_PACKAGE = "django_tasks"
except ImportError:
    TASKS_PACKAGE = "django_tasks"
if HAS_DJANGO_TASKS:
    if TASKS_PACKAGE == "django_tasks":
        INSTALLED_APPS.insert(-1, "django_tasks")
    INSTALLED_APPS.insert(-1, "django_tasks_db")
    TASKS = {
        "default": {
            "BACKEND": "django_tasks_db.backend.DatabaseBackend",
            "QUEUES": ["default", "reports"],
        },
        # Runs the task inside enqueue(), in the enqueuing process: for in-process tests.
        "immediate": {
            "BACKEND": f"{TASKS_PACKAGE}.backends.immediate.ImmediateBackend",
            "QUEUES": ["default", "reports"],
        },
    }
# django-tasks-rq (RQ on Redis): only in the tox environment "rq" (its rq-scheduler brings a
# "crontab" module that shadows the one django-celery-beat imports).
HAS_TASKS_RQ = HAS_DJANGO_TASKS and importlib.util.find_spec("django_tasks_rq") is not None
if HAS_TASKS_RQ:
    INSTALLED_APPS.insert(-1, "django_rq")
    # The URL is rewritten in place by tests/conftest.py once the suite's Redis is chosen.
    RQ_QUEUES = {"default": {"URL": REDIS_URL}}
    TASKS["rq"] = {"BACKEND": "django_tasks_rq.RQBackend", "QUEUES": ["default"]}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "tests.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

STATIC_URL = "static/"

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
}
SPECTACULAR_SETTINGS = {
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Tests create users; the slow default hasher would dominate their run time.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _database() -> dict[str, Any]:
    default_sqlite = "sqlite:///" + os.path.join(tempfile.gettempdir(), "dcc-tests.sqlite3")
    config: dict[str, Any] = dict(
        dj_database_url.parse(
            os.environ.get("DATABASE_URL") or default_sqlite,
            # Django's default, closed after each request; benchmarks may keep them (seconds).
            conn_max_age=int(os.environ.get("CONN_MAX_AGE") or 0),
        )
    )
    test_name = os.environ.get("TEST_DB_NAME")
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # A file, not Django's in-memory default, so that scheduler and worker subprocesses
        # started by the tests in tests/cluster can open the same test database.
        test_name = test_name or os.path.join(
            tempfile.gettempdir(), f"dcc-test-{os.getpid()}.sqlite3"
        )
        # IMMEDIATE: a transaction that reads and then writes (the admin's save) waits for the
        # write lock at its start; deferred, it failed at once with "database is locked" when a
        # scheduler or worker process was committing (SQLite does not wait where it could
        # deadlock).
        config.setdefault("OPTIONS", {}).update({"timeout": 20, "transaction_mode": "IMMEDIATE"})
    else:
        # One name per test run: parallel runs on one server must not drop each other's DB.
        test_name = test_name or f"test_{config['NAME']}_{os.getpid()}"
    config["TEST"] = {"NAME": test_name}
    if config["ENGINE"] == "django.db.backends.mysql":
        # Full Unicode (4-byte UTF-8) whatever the server's default character set is.
        config.setdefault("OPTIONS", {})["charset"] = "utf8mb4"
        config["TEST"].update({"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"})
    return config


DATABASES = {"default": _database()}

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "dcc-tests",
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
            # Bounded waits, so a paused (SIGSTOPped) Redis surfaces as an error, not a hang.
            "SOCKET_CONNECT_TIMEOUT": 2,
            "SOCKET_TIMEOUT": 2,
        },
    },
}

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or REDIS_URL
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_timeout": 5, "socket_connect_timeout": 2}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
if os.environ.get("TEST_RESULT_BACKEND") == "redis":
    # A worker that stores task states (tests/cluster/test_cancel_processes.py reads them).
    CELERY_RESULT_BACKEND = REDIS_URL

CLUSTER_CRON = {
    "REDIS_ALIAS": "default",
    "CELERY_APP": "tests.testapp.celery:app",
    # Runs go out as their job's own task, as after an upgrade is complete; the tests of the
    # upgrade itself ("auto", "execute_run") set it themselves.
    "MESSAGE_FORM": "task",
}

# Child processes started by the tests (schedulers, workers) take extra app settings as JSON,
# e.g. TEST_CLUSTER_CRON='{"OUTBOX_REPUBLISH_AFTER": 1, "KEY_PREFIX": "t123"}'.
CLUSTER_CRON.update(json.loads(os.environ.get("TEST_CLUSTER_CRON") or "{}"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"}
    },
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_cluster_cron": {"handlers": ["stderr"], "level": "INFO"},
        # db_worker's own lines ("Starting worker", a task's failure): the tests wait on them.
        "django_tasks_db": {"handlers": ["stderr"], "level": "INFO"},
    },
}
