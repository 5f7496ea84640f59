"""The cluster lock on each lease backend (Redis, the database), in this process and across real
processes."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
import redis

from django_cluster_cron.leases import get_backend
from django_cluster_cron.leases.redis import RedisBackend
from django_cluster_cron.locks import (
    SKIPPED,
    ClusterLock,
    LockNotAcquired,
    LockUnavailable,
    cluster_lock,
)
from tests.support.cluster import wait_for

# The database backend's rows must be committed: other connections and processes read them.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["redis", "database"])
def prefix(request, settings, redis_client):
    """A fresh key prefix, and the lease backend of this run of the test."""
    value = f"t{uuid.uuid4().hex[:8]}"
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "KEY_PREFIX": value,
        "LEASE_BACKEND": request.param,
    }
    return value


def lock_holder(name: str) -> str | None:
    return get_backend().lease(f"lock:{name}", "test", 1).holder()


def subprocess_settings(prefix: str) -> str:
    from django_cluster_cron.conf import app_settings

    backend = app_settings.LEASE_BACKEND
    return f'{{"KEY_PREFIX": "{prefix}", "LEASE_BACKEND": "{backend}"}}'


def test_a_held_lock_makes_a_decorated_call_return_skipped(prefix):
    calls = []

    @cluster_lock(ttl=5)
    def job():
        calls.append(1)
        return "ran"

    name = f"{job.__module__}.{job.__qualname__}"
    with ClusterLock(name, ttl=5):
        assert job() is SKIPPED
    assert job() == "ran"
    assert calls == [1]


def test_the_context_manager_raises_when_the_lock_is_held(prefix):
    with cluster_lock("shared", ttl=5), pytest.raises(LockNotAcquired), cluster_lock("shared"):
        pass


def test_blocking_waits_for_the_holder_up_to_the_timeout(prefix):
    holder = ClusterLock("wait", ttl=5)
    assert holder.acquire()
    threading.Timer(0.3, holder.release).start()
    waiter = ClusterLock("wait", ttl=5, blocking=True, timeout=5)
    started = time.monotonic()
    assert waiter.acquire()
    assert time.monotonic() - started >= 0.25
    waiter.release()
    holder2 = ClusterLock("wait", ttl=5)
    assert holder2.acquire()
    assert not ClusterLock("wait", ttl=5, blocking=True, timeout=0.2).acquire()
    holder2.release()


def test_the_heartbeat_keeps_a_body_three_times_longer_than_the_ttl_locked(prefix):
    attempts = []

    @cluster_lock("long", ttl=0.4)
    def long_body():
        for _ in range(6):
            time.sleep(0.2)
            attempts.append(ClusterLock("long", ttl=0.4).acquire())

    long_body()
    assert attempts == [False] * 6
    assert ClusterLock("long", ttl=0.4).acquire()  # released when the body ended


def test_at_least_keeps_the_lock_after_a_fast_body(prefix):
    @cluster_lock("atleast", ttl=5, at_least=1.0)
    def fast():
        return 1

    assert fast() == 1
    assert fast() is SKIPPED
    remaining = get_backend().lease("lock:atleast", "test", 1).remaining()
    assert 0 < (remaining or 0) <= 1
    wait_for(lambda: fast() == 1, 3, "the minimum hold to pass")


def test_redis_unreachable_means_the_body_does_not_run(throwaway_redis):
    client = redis.Redis.from_url(
        throwaway_redis.url, socket_timeout=0.3, socket_connect_timeout=0.3, retry_on_timeout=False
    )
    throwaway_redis.stop()
    ran = []
    with pytest.raises(LockUnavailable):
        ClusterLock("down", ttl=1, backend=RedisBackend(client=client)).acquire()
    lock = cluster_lock("down", ttl=1, backend=RedisBackend(client=client), on_unavailable="skip")
    assert lock(lambda: ran.append(1))() is SKIPPED
    strict = cluster_lock("down", ttl=1, backend=RedisBackend(client=client))
    with pytest.raises(LockUnavailable):
        strict(lambda: ran.append(1))()
    assert ran == []


RACER = textwrap.dedent(
    """
    import os, sys, time, django
    django.setup()
    import redis
    from django_cluster_cron.locks import cluster_lock
    log = redis.Redis.from_url(os.environ["REDIS_URL"])
    key = sys.argv[1]

    @cluster_lock("race", ttl=2, blocking=True, timeout=30)
    def body():
        start = time.time()
        time.sleep(0.01)
        log.rpush(key, f"{start} {time.time()} {os.getpid()}")

    for _ in range(int(sys.argv[2])):
        body()
    """
)


@pytest.mark.slow
def test_two_processes_racing_for_a_decorated_function_never_overlap(
    django_subprocess_env, prefix, redis_client
):
    env = {**django_subprocess_env, "TEST_CLUSTER_CRON": subprocess_settings(prefix)}
    key = f"{prefix}:race-log"
    racers = [subprocess.Popen([sys.executable, "-c", RACER, key, "40"], env=env) for _ in range(2)]
    for racer in racers:
        assert racer.wait(120) == 0
    spans = sorted(tuple(map(float, raw.split()[:2])) for raw in redis_client.lrange(key, 0, -1))
    pids = {raw.split()[2] for raw in redis_client.lrange(key, 0, -1)}
    assert len(spans) == 80
    assert len(pids) == 2
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, "two bodies held the lock at once"


HOLDER = textwrap.dedent(
    """
    import sys, time, django
    django.setup()
    from django_cluster_cron.locks import ClusterLock
    lock = ClusterLock("stale", ttl=1)
    assert lock.acquire()
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
    lock.release()
    print("released", flush=True)
    """
)


@pytest.mark.slow
def test_a_stale_holder_paused_past_its_ttl_cannot_release_the_new_holders_lock(
    django_subprocess_env, prefix
):
    env = {**django_subprocess_env, "TEST_CLUSTER_CRON": subprocess_settings(prefix)}
    old = subprocess.Popen(
        [sys.executable, "-c", HOLDER, "1"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert old.stdout is not None
    assert old.stdout.readline().strip() == "held"
    os.kill(old.pid, signal.SIGSTOP)
    new = ClusterLock("stale", ttl=10)
    wait_for(new.acquire, 10, "the paused holder's lock to expire")
    os.kill(old.pid, signal.SIGCONT)
    assert old.wait(30) == 0  # it woke, finished its body and "released"
    assert lock_holder("stale") == new.token
    new.release()
    assert lock_holder("stale") is None
