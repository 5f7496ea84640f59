"""The cluster lock across real processes, on each lease backend (Redis, the database): two
processes racing for a decorated function, and a holder paused past its TTL."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from django_cluster_cron.locks import ClusterLock
from tests.support.locks import lock_holder, prefix, subprocess_settings
from tests.support.timing import ttl_outlasting
from tests.support.waiting import wait_for

__all__ = ["prefix"]

# The database backend's rows must be committed: other connections and processes read them.
pytestmark = pytest.mark.django_db(transaction=True)


RACER = textwrap.dedent(
    """
    import os, sys, time, django
    django.setup()
    import redis
    from django_cluster_cron.locks import cluster_lock
    log = redis.Redis.from_url(os.environ["REDIS_URL"])
    key = sys.argv[1]

    @cluster_lock("race", ttl=float(sys.argv[3]), blocking=True, timeout=30)
    def body():
        start = time.time()
        time.sleep(0.01)  # a body that takes a moment: two that overlapped would show it
        log.rpush(key, f"{start} {time.time()} {os.getpid()}")

    for _ in range(int(sys.argv[2])):
        body()
    """
)


def test_two_processes_racing_for_a_decorated_function_never_overlap(
    django_subprocess_env, prefix, redis_client
):
    env = {**django_subprocess_env, "TEST_CLUSTER_CRON": subprocess_settings(prefix)}
    key = f"{prefix}:race-log"
    # A holder stalled in its body keeps the lock: the other must not take it meanwhile.
    argv = [sys.executable, "-c", RACER, key, "40", str(ttl_outlasting(calls=2))]
    racers = [subprocess.Popen(argv, env=env) for _ in range(2)]
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
    time.sleep(float(sys.argv[1]))  # holds the lock this long, paused meanwhile
    lock.release()
    print("released", flush=True)
    """
)


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
    # Held until the end of the test: the old holder wakes, ends its body and exits meanwhile.
    new = ClusterLock("stale", ttl=ttl_outlasting(calls=10))
    wait_for(new.acquire, 30, "the paused holder's lock to expire")
    os.kill(old.pid, signal.SIGCONT)
    assert old.wait(30) == 0  # it woke, finished its body and "released"
    assert lock_holder("stale") == new.token
    new.release()
    assert lock_holder("stale") is None
