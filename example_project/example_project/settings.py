"""Settings for the example project.

Everything that differs between a laptop and a deployment comes from the environment:

- ``DJANGO_DEBUG`` (default ``1``: this project is a demo), ``DJANGO_SECRET_KEY``,
  ``DJANGO_ALLOWED_HOSTS`` (comma-separated)
- ``DATABASE_URL`` (default: SQLite file next to ``manage.py``), e.g.
  ``postgres://user:pass@127.0.0.1:5432/cron_demo``
- ``LEASE_BACKEND``: ``redis`` (default) or ``database`` — where the leader lease and the
  cluster locks live; with ``database`` the project needs no Redis unless it is the broker
- ``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``): the cache that holds the leader lease,
  and the Celery broker unless ``CELERY_BROKER_URL`` says otherwise
- ``CELERY_BROKER_URL``, e.g. ``amqp://guest:guest@127.0.0.1:5672//`` for RabbitMQ
"""

import json
import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = env_flag("DJANGO_DEBUG", default=True)
SECRET_KEY = os.environ.get(
    "DJANGO_SECRET_KEY", "django-insecure-example-project-dev-only-never-use-in-production"
)
ALLOWED_HOSTS = [
    host.strip()
    for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
    if host.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_cluster_cron",
    # The REST API (the api extra): /cron/api/, its schema and Swagger UI at /cron/api/docs/.
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "demo",
]

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "django-cluster-cron example",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

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

# --- Database -------------------------------------------------------------------------------

DATABASES = {
    "default": dj_database_url.config(
        env="DATABASE_URL", default="sqlite:///" + str(BASE_DIR / "db.sqlite3")
    ),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The demo runs several processes on one SQLite file (web server, Celery worker, two
    # schedulers). WAL lets readers proceed while one process writes; IMMEDIATE takes the write
    # lock when a transaction starts, so a writer waits (up to `timeout` seconds) instead of
    # failing with "database is locked" when it upgrades a read lock. Use Postgres beyond a demo.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
        }
    )

if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    DATABASES["default"].setdefault("OPTIONS", {})["charset"] = "utf8mb4"
# Bounded waits on a link that goes silent, so a scheduler stuck there fails and another node
# leads (check cluster_cron.W006 names what is missing; docs/how-to/deploy-systemd.md says why).
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "connect_timeout": 5,
            "keepalives": 1,
            "keepalives_idle": 5,
            "keepalives_interval": 2,
            "keepalives_count": 3,
            "tcp_user_timeout": 10_000,
        }
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    DATABASES["default"]["OPTIONS"].update(
        {"connect_timeout": 5, "read_timeout": 60, "write_timeout": 60}
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
USE_I18N = True
USE_TZ = True
TIME_ZONE = "UTC"

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

# --- The lease: Redis (a django-redis cache) or the database -----------------------------------

LEASE_BACKEND = os.environ.get("LEASE_BACKEND", "redis")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "example_project",
        "OPTIONS": {
            # Fail fast when Redis is down: the scheduler treats that as "not leading" and
            # retries, rather than hanging a tick on a dead socket.
            "SOCKET_CONNECT_TIMEOUT": 2,
            "SOCKET_TIMEOUT": 2,
        },
    },
}

CLUSTER_CRON = {
    # The lease is taken through django-redis on this cache alias, so it shares the cache's
    # connection settings (Sentinel, TLS, password).
    "REDIS_ALIAS": "default",
    "CELERY_APP": "example_project.celery:app",
    # Adding a job runs a task with arguments of the adder's choice: only this project's own
    # tasks may be scheduled (checked on save, when due and when run).
    "TASK_ALLOWLIST": ["demo.*"],
}
if LEASE_BACKEND == "database":
    # No Redis for the app at all: the lease, locks and node reports live in the database.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CLUSTER_CRON = {
        "LEASE_BACKEND": "database",
        "CELERY_APP": "example_project.celery:app",
        "TASK_ALLOWLIST": ["demo.*"],
    }
# --- Django's own tasks instead of Celery: DEMO_TASKS=django (`make demo TASKS=django`) -----------
# The jobs' tasks are django.tasks tasks (demo/djtasks.py), run by django-tasks-db's db_worker;
# with the database lease, the database is the only server: no Redis, no broker.
DEMO_TASKS = os.environ.get("DEMO_TASKS", "celery")
if DEMO_TASKS == "django":
    import importlib.util

    try:
        django_has_tasks = importlib.util.find_spec("django.tasks") is not None
    except ImportError:
        django_has_tasks = False
    if not django_has_tasks:  # Django 5.2: the django-tasks backport
        INSTALLED_APPS.insert(-1, "django_tasks")
    INSTALLED_APPS.insert(-1, "django_tasks_db")
    TASKS = {"default": {"BACKEND": "django_tasks_db.backend.DatabaseBackend"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CLUSTER_CRON = {"LEASE_BACKEND": "database", "TASK_ALLOWLIST": ["demo.*"]}
# Extra app settings as JSON, e.g. CLUSTER_CRON_JSON='{"LEASE_TTL": 2}' (the chaos suite uses it).
CLUSTER_CRON.update(json.loads(os.environ.get("CLUSTER_CRON_JSON") or "{}"))

# --- Celery ---------------------------------------------------------------------------------

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = TIME_ZONE
CELERY_ENABLE_UTC = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# No result backend: django-cluster-cron records each run's status, duration, error and a short
# result in its own JobRun table.
CELERY_TASK_IGNORE_RESULT = True
# Acknowledge a message after the task finishes, not when a worker receives it, and hand each
# worker process one message at a time: a worker that dies loses no queued slot, and a long job
# does not hold other slots hostage in its prefetch buffer.
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# If the process running a task is killed (OOM, SIGKILL), put the message back on the queue
# instead of acknowledging it as failed. Without this, acks_late does not cover a lost worker
# and a slot whose message died before its run was claimed would be lost. Redelivery is safe
# here because the worker claims the JobRun with a conditional update before running it: a
# copy of a run that already started is dropped, so the job body never runs twice. The cost
# is for plain tasks sent by hand: one that kills its worker every time is redelivered every
# time, so watch for it in the worker logs.
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# With the Redis broker, a message that is not acknowledged within the visibility timeout is
# delivered again. Keep it longer than the longest job (and any countdown); the claim drops the
# duplicate either way, but a shorter timeout wastes deliveries.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_WORKER_SEND_TASK_EVENTS = False

# --- Logging --------------------------------------------------------------------------------

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "compact": {
            "format": "%(asctime)s %(levelname)-7s %(processName)s[%(process)d] "
            "%(name)s: %(message)s",
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "compact"},
    },
    "loggers": {
        "django_cluster_cron": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "demo": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
