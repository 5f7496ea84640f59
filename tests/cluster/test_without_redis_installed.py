"""Redis is an optional extra: with redis-py and django-redis not importable at all, a project on
the database lease and another broker migrates, passes its checks, and records and sends a due
run with ``run_scheduler --once``; a project that asks for the Redis lease is told what to
install (``cluster_cron.E008``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Loaded before anything else in each process: redis-py and django-redis cannot be imported.
BLOCKER = """
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("redis", "django_redis"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""

SETTINGS = """
SECRET_KEY = "not-secret"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_cluster_cron",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}}
CELERY_APP_MODULE = "noredis_celery"
CLUSTER_CRON = {
    "LEASE_BACKEND": LEASE,
    "CELERY_APP": "noredis_celery:app",
    "JOBS": {"every-second": {"schedule": "* * * * * *", "task": "noredis.tick"}},
}
"""

CELERY = """
from celery import Celery

app = Celery("noredis", broker="memory://", set_as_current=True)


@app.task(name="noredis.tick")
def tick():
    return "tick"
"""

PROBE = """
import pkgutil, importlib, django_cluster_cron

skipped = {"django_cluster_cron.leases.redis"}  # the Redis lease itself
for module in pkgutil.walk_packages(django_cluster_cron.__path__, "django_cluster_cron."):
    if module.name in skipped or ".migrations" in module.name:
        continue
    importlib.import_module(module.name)
"""


def project(tmp_path: Path, lease: str) -> tuple[Path, dict[str, str]]:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    (tmp_path / "noredis_settings.py").write_text(f"LEASE = {lease!r}\n" + SETTINGS)
    (tmp_path / "noredis_celery.py").write_text(CELERY)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")
    }
    env.update(
        DJANGO_SETTINGS_MODULE="noredis_settings",
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
    )
    return tmp_path, env


def django_admin(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.timeout(300)
def test_the_database_lease_needs_no_redis_library(tmp_path):
    cwd, env = project(tmp_path, "database")
    blocked = django_admin(cwd, env, "shell", "-c", "import redis")
    assert "No module named 'redis'" in blocked.stderr, blocked.stderr  # the blocker works
    for args in (("migrate", "-v", "0"), ("check",), ("shell", "-c", PROBE)):
        done = django_admin(cwd, env, *args)
        assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    once = django_admin(cwd, env, "run_scheduler", "--once", "--node-id", "noredis")
    assert once.returncode == 0, once.stdout + once.stderr
    sent = django_admin(
        cwd,
        env,
        "shell",
        "-c",
        textwrap.dedent(
            """
            from django_cluster_cron.models import JobRun
            print(JobRun.objects.filter(status="queued").count())
            """
        ),
    )
    assert sent.returncode == 0, sent.stderr
    assert int(sent.stdout.split()[-1]) >= 1, once.stdout + once.stderr


@pytest.mark.timeout(120)
def test_the_redis_lease_without_its_libraries_says_what_to_install(tmp_path):
    cwd, env = project(tmp_path, "redis")
    done = django_admin(cwd, env, "check")
    assert done.returncode != 0
    assert "cluster_cron.E008" in done.stderr, done.stderr
    assert "django-cluster-cron[redis]" in done.stderr
