"""The test harness's processes: a throwaway Redis never outlives the process that owns it, the
devredis command line serves until SIGTERM, and child processes (a Django script, a Celery
worker) see the test database and the suite's Redis.

The throwaway servers themselves, finding the binary and the settings wiring are
tests/database/test_harness.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from tests.conftest import DEVREDIS_PATH, devredis
from tests.support.waiting import wait_for


def client_for(url: str, timeout: float = 2.0) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


# -- orphans and the command line -------------------------------------------------------------


def run_owner_script(body: str) -> subprocess.Popen[str]:
    """A child Python process that owns a RedisServer and prints 'PORT PID' once it runs."""
    script = textwrap.dedent(
        f"""
        import importlib.util, sys, time
        spec = importlib.util.spec_from_file_location("devredis", {str(DEVREDIS_PATH)!r})
        devredis = importlib.util.module_from_spec(spec)
        sys.modules["devredis"] = devredis
        spec.loader.exec_module(devredis)
        server = devredis.RedisServer().start()
        print(server.port, server.pid, flush=True)
        """
    ) + textwrap.dedent(body)
    return subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )


def read_port_and_pid(owner: subprocess.Popen[str]) -> tuple[int, int]:
    assert owner.stdout is not None
    port, pid = owner.stdout.readline().split()
    return int(port), int(pid)


def process_is_gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status  # a zombie waiting for init to reap it is gone as well


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
@pytest.mark.parametrize(
    "ending",
    ["pass  # still referenced at exit: atexit", "del server  # dropped: garbage collection"],
)
def test_a_server_nobody_stopped_dies_when_its_owner_exits(ending: str) -> None:
    owner = run_owner_script(ending + "\n")
    port, pid = read_port_and_pid(owner)
    assert owner.wait(timeout=15) == 0

    wait_for(lambda: process_is_gone(pid), 10, f"the server (pid {pid}) to end")
    assert not devredis.ping(port, timeout=0.2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and prctl")
def test_a_server_dies_when_its_owner_is_killed() -> None:
    owner = run_owner_script("time.sleep(60)  # alive until killed\n")
    port, pid = read_port_and_pid(owner)
    assert devredis.ping(port)

    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=15)

    wait_for(lambda: process_is_gone(pid), 10, f"the server (pid {pid}) to end")
    assert not devredis.ping(port, timeout=0.2)


def test_cli_serve_prints_the_url_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, str(DEVREDIS_PATH), "serve"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        port = urlsplit(url).port
        assert url == f"redis://127.0.0.1:{port}/0"
        assert client_for(url).ping() is True

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert port is not None
        assert not devredis.ping(port, timeout=0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- child processes ------------------------------------------------------------------------


def test_a_child_process_sees_the_test_database_and_the_suite_redis(
    django_subprocess_env: dict[str, str], redis_url: str
) -> None:
    from django.contrib.auth.models import User

    User.objects.create(username="seen-by-child")
    child = textwrap.dedent(
        """
        import django
        django.setup()
        from django.conf import settings
        from django.contrib.auth.models import User
        from django.core.cache import cache
        cache.set("child", "ok")
        print(User.objects.filter(username="seen-by-child").count())
        print(settings.CACHES["default"]["LOCATION"])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", child],
        env=django_subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", redis_url]

    from django.core.cache import cache

    assert cache.get("child") == "ok"


def test_a_celery_worker_process_runs_the_test_tasks_from_the_suite_broker(
    django_subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    from tests.testapp.celery import app

    log = tmp_path / "worker.log"
    command = [sys.executable, "-m", "celery", "-A", "tests.testapp.celery:app", "worker"]
    options = ["--pool=solo", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    with log.open("w") as output:
        worker = subprocess.Popen(
            [*command, *options, "--loglevel=INFO", f"--hostname=harness-{os.getpid()}@%h"],
            env=django_subprocess_env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        result = app.send_task("tests.add", args=(2, 3))
        finished = f"Task tests.add[{result.id}] succeeded"
        wait_for(
            lambda: finished in log.read_text(),
            60,
            "the worker to run tests.add",
            detail=log.read_text,
        )
        assert log.read_text().split(finished, 1)[1].splitlines()[0].endswith(": 5")
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
