"""Real processes for the multi-process tests (tests/cluster, and the browser session):
`run_scheduler` nodes, Celery workers and django-tasks-db's ``db_worker``.

Every process gets the test database and the suite's Redis through ``django_subprocess_env``,
its own key prefix, the lease backend of the test (``lease_kind``: Redis unless a test
parametrizes it), extra app settings as JSON (``TEST_CLUSTER_CRON``) and a log file.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import wait_for

# The nodes' lease TTL and poll interval: short on purpose, for the tests measure a failover
# against them; a bound on a measured time leaves room with tests.support.timing.stalls.
TTL = 2.0
POLL = 0.2


def every_second_job(name: str = "tick", **fields: Any) -> Any:
    """A validated ``* * * * * *`` job that catches up every slot of a short outage."""
    from django_cluster_cron.models import JobDefinition

    values: dict[str, Any] = {
        "cron": "* * * * * *",
        "timezone": "UTC",
        "task": "tests.add",
        "args": [1, 2],
        "catchup_policy": "all",
        "catchup_window": timedelta(minutes=5),
    }
    values.update(fields)
    job = JobDefinition(name=name, **values)
    job.full_clean()
    job.save()
    return job


def sent_by(node: str, job: Any, after: datetime | None = None) -> bool:
    """Whether scheduler ``node`` has sent a run of ``job`` (one due after ``after``, if given)."""
    from django_cluster_cron.models import JobRun

    runs = JobRun.objects.filter(job=job, dispatched_by=node, queued_at__isnull=False)
    if after is not None:
        runs = runs.filter(scheduled_for__gt=after)
    return bool(runs.exists())


def assert_every_slot_once(job: Any) -> list[datetime]:
    """Every second from the first recorded slot to the last has one run, and none is missed."""
    from django_cluster_cron.models import JobRun, RunStatus

    slots = list(
        JobRun.objects.filter(job=job)
        .order_by("scheduled_for")
        .values_list("scheduled_for", flat=True)
    )
    assert slots, "no run recorded"
    gaps = [(a, b) for a, b in itertools.pairwise(slots) if b - a != timedelta(seconds=1)]
    assert not gaps, f"slots missing between {gaps[:3]}"
    assert not JobRun.objects.filter(job=job, status=RunStatus.MISSED).exists()
    return slots


def cut_other_connections() -> int:
    """Terminate every other session on the test database (the processes' connections)."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return len(cursor.fetchall())
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT id FROM information_schema.processlist "
                "WHERE db = DATABASE() AND id <> CONNECTION_ID()"
            )
            ids = [row[0] for row in cursor.fetchall()]
            for pid in ids:
                try:
                    cursor.execute(f"KILL CONNECTION {int(pid)}")
                except Exception:  # it ended by itself meanwhile
                    continue
            return len(ids)
    raise NotImplementedError(f"cannot cut connections of a {connection.vendor} server")


class Cluster:
    def __init__(self, env: dict[str, str], logs: Path, lease_kind: str = "redis") -> None:
        self.prefix = f"t{uuid.uuid4().hex[:8]}"
        self.env = env
        self.logs = logs
        self.lease_kind = lease_kind
        self.settings: dict[str, Any] = {"KEY_PREFIX": self.prefix, "LEASE_BACKEND": lease_kind}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _spawn(
        self, name: str, command: list[str], extra: dict[str, Any]
    ) -> subprocess.Popen[bytes]:
        env = dict(self.env)
        env["TEST_CLUSTER_CRON"] = json.dumps({**self.settings, **extra.pop("settings", {})})
        offset = extra.pop("clock_offset", None)
        if offset is not None:
            command, env = under_faketime(command, env, offset)
        # ``code=<dir>``: run another checkout of the project (its app and its tests).
        code = extra.pop("code", None)
        if code is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")])
        env.update({k: str(v) for k, v in extra.items()})
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 (lives as long as the process)
        proc = subprocess.Popen(
            command,
            env=env,
            cwd=code,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs[name] = proc
        return proc

    def start(self, node: str, **extra: Any) -> subprocess.Popen[bytes]:
        """A `run_scheduler` node with the short test TTL and poll interval.

        ``clock_offset="+30s"`` runs it on a host clock that far off (Debian's faketime);
        ``args=[...]`` adds command-line options; ``fault="after_record"`` runs instead a
        scheduler that dies there (tests/support/faults.py); other keywords become
        environment variables.
        """
        fault = extra.pop("fault", None)
        if fault is not None:
            faulty = [sys.executable, "-m", "tests.support.faults", fault, node]
            return self._spawn(node, [*faulty, str(TTL), str(POLL)], extra)
        command = [
            sys.executable,
            "-m",
            "django",
            "run_scheduler",
            "--node-id",
            node,
            "--lease-ttl",
            str(TTL),
            "--poll-interval",
            str(POLL),
            *extra.pop("args", []),
        ]
        return self._spawn(node, command, extra)

    def worker(self, name: str, *, concurrency: int = 1, **extra: Any) -> subprocess.Popen[bytes]:
        """A Celery worker of the test app (prefork with ``concurrency`` children, or solo);
        ``args=[...]`` adds command-line options, other keywords become environment variables."""
        pool = (
            ["--pool=solo"]
            if concurrency == 1
            else ["--pool=prefork", f"--concurrency={concurrency}"]
        )
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.testapp.celery:app",
            "worker",
            *pool,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
            f"--hostname={name}@%h",
            *extra.pop("args", []),
        ]
        return self._spawn(name, command, extra)

    def db_worker(self, name: str, **extra: Any) -> subprocess.Popen[bytes]:
        """A django-tasks-db ``db_worker`` of the test project, on every queue, polling every
        0.1 s; ``args=[...]`` adds command-line options, other keywords become environment
        variables. Ready once :meth:`wait_db_worker` returns."""
        command = [
            sys.executable,
            "-m",
            "django",
            "db_worker",
            "--queue-name",
            "*",
            "--interval",
            "0.1",
            "--no-startup-delay",
            "--no-reload",
            "--worker-id",
            name,
            *extra.pop("args", []),
        ]
        return self._spawn(name, command, extra)

    def wait_db_worker(self, name: str, timeout: float = 60) -> None:
        wait_for(lambda: "Starting worker" in self.log(name), timeout, f"db_worker {name} to start")

    def wait_ready(self, name: str, timeout: float = 60) -> None:
        wait_for(lambda: "ready." in self.log(name), timeout, f"worker {name} to start")

    def wait_started(self, name: str, timeout: float = 60) -> None:
        """Until scheduler ``name`` runs its loop (its start-up is over: on a loaded machine,
        importing and connecting take seconds that a failover measurement must not count)."""
        wait_for(
            lambda: "scheduler.started" in self.log(name), timeout, f"scheduler {name} to start"
        )

    def wait_standby(self, name: str, timeout: float = 60) -> None:
        """Until scheduler ``name`` has made a pass as a standby: it tried the lease, lost to
        the leader, and reported itself (role ``standby``) where the nodes report."""
        from django_cluster_cron.ops.status import cluster_status

        def standing_by() -> bool:
            nodes = cluster_status(runs=False).nodes
            return any(n.get("node") == name and n.get("role") == "standby" for n in nodes)

        wait_for(standing_by, timeout, f"scheduler {name} to try the lease as a standby")

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text() if path.exists() else ""

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


FAKETIME_SHIM = Path(__file__).resolve().parent / "faketime"
# Debian's libfaketime (package faketime). Preloaded straight into the process rather than
# through the `faketime` command, which forks and waits: a SIGKILL to it would leave the real
# process running.
LIBFAKETIME_DIRS = ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime")


def faketime_path() -> str | None:
    """The libfaketime shared object, or None when Debian's faketime is not installed."""
    for directory in LIBFAKETIME_DIRS:
        candidate = Path(directory) / "libfaketime.so.1"
        if candidate.exists():
            return str(candidate)
    return None


def under_faketime(
    command: list[str], env: dict[str, str], offset: str
) -> tuple[list[str], dict[str, str]]:
    """``command`` on a wall clock ``offset`` away from the real one (e.g. ``"+30s"``); the
    monotonic clock stays real (see faketime/sitecustomize.py)."""
    library = faketime_path()
    if library is None:
        raise RuntimeError("the clock-skew tests need Debian's faketime: apt-get install faketime")
    env = dict(env)
    env["LD_PRELOAD"] = library
    env["FAKETIME"] = offset
    env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(FAKETIME_SHIM), env.get("PYTHONPATH", "")])
    return command, env


@pytest.fixture
def lease_kind() -> str:
    """The lease backend of a test's processes; parametrize it over ``LEASES`` to run both."""
    return "redis"


@pytest.fixture
def cluster(
    django_subprocess_env: dict[str, str],
    tmp_path: Path,
    settings: Any,
    lease_kind: str,
    redis_client: Any,
) -> Any:
    # redis_client empties the suite's Redis (this pytest worker's own) before the test and
    # after its processes stopped: the broker's queues too, so that no test's workers receive
    # messages an earlier test left behind (runs of jobs this test's database never had).
    c = Cluster(django_subprocess_env, tmp_path, lease_kind)
    # The test process reads the same keys and rows (counters, locks) as the processes it starts.
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "KEY_PREFIX": c.prefix,
        "LEASE_BACKEND": lease_kind,
    }
    yield c
    c.stop_all()
