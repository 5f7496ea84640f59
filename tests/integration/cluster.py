"""Real processes for the integration tests: `run_scheduler` nodes and Celery workers.

Every process gets the test database and the suite's Redis through ``django_subprocess_env``,
its own key prefix, extra app settings as JSON (``TEST_CLUSTER_CRON``) and a log file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

TTL = 2.0
POLL = 0.2


def wait_for(predicate: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Cluster:
    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.prefix = f"t{uuid.uuid4().hex[:8]}"
        self.env = env
        self.logs = logs
        self.settings: dict[str, Any] = {"KEY_PREFIX": self.prefix}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _spawn(
        self, name: str, command: list[str], extra: dict[str, Any]
    ) -> subprocess.Popen[bytes]:
        env = dict(self.env)
        env["TEST_CLUSTER_CRON"] = json.dumps({**self.settings, **extra.pop("settings", {})})
        env.update({k: str(v) for k, v in extra.items()})
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 (lives as long as the process)
        proc = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        self.procs[name] = proc
        return proc

    def start(self, node: str, **extra: Any) -> subprocess.Popen[bytes]:
        """A `run_scheduler` node with the short test TTL and poll interval."""
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
        ]
        return self._spawn(node, command, extra)

    def worker(self, name: str, *, concurrency: int = 1, **extra: Any) -> subprocess.Popen[bytes]:
        """A Celery worker of the test app (prefork with ``concurrency`` children, or solo)."""
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
        ]
        return self._spawn(name, command, extra)

    def wait_ready(self, name: str, timeout: float = 60) -> None:
        wait_for(lambda: "ready." in self.log(name), timeout, f"worker {name} to start")

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


@pytest.fixture
def cluster(django_subprocess_env: dict[str, str], tmp_path: Path, settings: Any) -> Any:
    c = Cluster(django_subprocess_env, tmp_path)
    # The test process reads the same keys (counters, locks) as the processes it starts.
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": c.prefix}
    yield c
    c.stop_all()
