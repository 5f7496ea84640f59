"""The cluster lock on each lease backend (Redis, the database), in this process (across real
processes: tests/cluster/test_lock_processes.py)."""

from __future__ import annotations

import threading
import time

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
from tests.support.locks import prefix
from tests.support.waiting import wait_for

__all__ = ["prefix"]

# The database backend's rows must be committed: other connections and processes read them.
pytestmark = pytest.mark.django_db(transaction=True)


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
    started = time.monotonic()  # before the timer: a stall after it cannot shorten the wait
    threading.Timer(0.3, holder.release).start()
    waiter = ClusterLock("wait", ttl=5, blocking=True, timeout=5)
    assert waiter.acquire()
    assert time.monotonic() - started >= 0.25
    waiter.release()
    holder2 = ClusterLock("wait", ttl=5)
    assert holder2.acquire()
    assert not ClusterLock("wait", ttl=5, blocking=True, timeout=0.2).acquire()
    holder2.release()


def test_the_heartbeat_keeps_a_body_three_times_longer_than_the_ttl_locked(prefix):
    attempts = []
    ttl = 1.2  # renewed every 0.3 s: a loaded machine may stall the heartbeat 0.9 s and not lose it

    @cluster_lock("long", ttl=ttl)
    def long_body():
        for _ in range(6):
            time.sleep(ttl / 2)  # real time must pass: the body lasts three TTLs
            attempts.append(ClusterLock("long", ttl=ttl).acquire())

    long_body()
    assert attempts == [False] * 6
    assert ClusterLock("long", ttl=ttl).acquire()  # released when the body ended


def test_at_least_keeps_the_lock_after_a_fast_body(prefix):
    # Held: a minimum hold no stall of a loaded machine can outlast.
    @cluster_lock("atleast-held", ttl=5, at_least=60)
    def held():
        return 1

    assert held() == 1
    assert held() is SKIPPED
    remaining = get_backend().lease("lock:atleast-held", "test", 1).remaining()
    assert 0 < (remaining or 0) <= 60

    # Released: a short minimum hold ends on its own (the TTL is longer).
    @cluster_lock("atleast", ttl=5, at_least=0.5)
    def fast():
        return 1

    assert fast() == 1
    assert (get_backend().lease("lock:atleast", "test", 1).remaining() or 0) <= 0.5
    wait_for(lambda: fast() == 1, 10, "the minimum hold to pass")


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
