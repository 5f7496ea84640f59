"""``manage.py run_scheduler --once`` as cron and Kubernetes CronJobs run it: a real process whose
exit status is all the caller sees.

The contract tested here:

* it dispatches what is due and exits 0;
* another node holds the lease: exit 0, nothing dispatched (a standby is a normal state in a
  cluster, not a failure; the leader does the work), and it says so on stdout;
* Redis, the database or the broker unreachable: exit 1, with stderr naming what was down;
* the database reachable but not migrated: exit 1, telling the operator to migrate.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from django_cluster_cron.leases import LEADER, get_backend
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus

pytestmark = pytest.mark.timeout(120)

REPO_ROOT = Path(__file__).resolve().parents[2]
# How long one ``--once`` process may take (start-up included) before the test gives up on it.
RUN_TIMEOUT = 90


def run_once(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "django",
            "run_scheduler",
            "--once",
            "--node-id",
            "once-test",
            *extra,
        ],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def due_job() -> JobDefinition:
    job = JobDefinition(
        name="once",
        cron="* * * * * *",
        timezone="UTC",
        task="tests.add",
        args=[1, 2],
        catchup_policy="latest",
        catchup_window=timedelta(minutes=5),
    )
    job.full_clean()
    job.save()
    # Time must pass: the job's first slot, at most a second away, falls due before the tick.
    time.sleep(1.2)
    return job


def dead_redis_url(throwaway_redis: Any) -> str:
    url = str(throwaway_redis.url)
    throwaway_redis.stop()
    return url


def test_dispatches_and_exits_zero(django_subprocess_env, redis_client):
    job = due_job()
    done = run_once(django_subprocess_env)
    assert done.returncode == 0, done.stderr
    runs = list(JobRun.objects.filter(job=job).exclude(status=RunStatus.MISSED))
    assert len(runs) == 1, runs
    assert runs[0].status == RunStatus.QUEUED
    assert runs[0].task_id.startswith("cron-")


def test_standby_exits_zero_and_dispatches_nothing(django_subprocess_env, redis_client):
    job = due_job()
    other = get_backend().lease(LEADER, "other-node", ttl=RUN_TIMEOUT)  # held while it runs
    assert other.try_acquire()
    try:
        done = run_once(django_subprocess_env)
    finally:
        other.release()
    assert done.returncode == 0, done.stderr
    assert "Another node holds the lease" in done.stdout
    assert not JobRun.objects.filter(job=job).exists()


def test_redis_down_exits_one_and_names_it(django_subprocess_env, throwaway_redis):
    job = due_job()
    url = dead_redis_url(throwaway_redis)
    env = {**django_subprocess_env, "REDIS_URL": url, "CELERY_BROKER_URL": url}
    done = run_once(env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "unavailable: Redis" in done.stderr
    assert not JobRun.objects.filter(job=job).exists()


def test_database_down_exits_one_and_names_it(django_subprocess_env, redis_client, tmp_path):
    env = {
        **django_subprocess_env,
        "DATABASE_URL": "sqlite:///" + str(tmp_path / "no-such-dir" / "db.sqlite3"),
    }
    done = run_once(env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "the database" in done.stderr


def test_broker_down_exits_one_and_names_it(django_subprocess_env, redis_client, throwaway_redis):
    job = due_job()
    env = {**django_subprocess_env, "CELERY_BROKER_URL": dead_redis_url(throwaway_redis)}
    done = run_once(env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "the Celery broker" in done.stderr
    # The run is recorded (the outbox): a later tick publishes it.
    assert JobRun.objects.filter(job=job, status=RunStatus.PENDING).count() == 1


def test_an_unmigrated_database_exits_one_and_says_migrate(django_subprocess_env, tmp_path):
    env = {**django_subprocess_env, "DATABASE_URL": "sqlite:///" + str(tmp_path / "new.sqlite3")}
    done = run_once(env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "run `manage.py migrate` first" in done.stderr
    assert "django_cluster_cron.0001_initial" in done.stderr
