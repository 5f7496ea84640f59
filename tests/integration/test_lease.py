"""The Redis leader lease against a real Redis: ownership, expiry, junk keys, restarts, outages."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_cluster_cron.lease import LeaderLease, LeaseUnavailable

KEY = "test-lease:leader"


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` every 20 ms until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def seconds_left(client: redis.Redis, key: str = KEY) -> float:
    return int(client.pttl(key)) / 1000


@pytest.fixture
def own_client(throwaway_redis: Any) -> Iterator[redis.Redis]:
    """A client to ``throwaway_redis`` that gives up fast: short timeouts, no retries."""
    client = redis.Redis.from_url(
        throwaway_redis.url,
        socket_timeout=0.25,
        socket_connect_timeout=0.25,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        yield client
    finally:
        client.close()


# -- ownership ---------------------------------------------------------------------------------


def test_only_one_of_two_nodes_acquires_and_holder_shows_the_winners_token(
    redis_client: redis.Redis,
) -> None:
    first = LeaderLease(redis_client, KEY, "node-a", ttl=1)
    second = LeaderLease(redis_client, KEY, "node-b", ttl=1)

    assert first.holder() is None
    assert first.remaining() is None
    assert first.try_acquire() is True
    assert second.try_acquire() is False

    assert first.holder() == second.holder() == first.token
    assert first.token.startswith("node-a:")
    assert redis_client.get(KEY) == first.token.encode()
    assert 0 < (first.remaining() or 0) <= 1


def test_two_processes_with_the_same_node_id_get_different_tokens(
    redis_client: redis.Redis,
) -> None:
    first = LeaderLease(redis_client, KEY, "host-1", ttl=1)
    second = LeaderLease(redis_client, KEY, "host-1", ttl=1)

    assert first.token != second.token
    assert first.try_acquire() is True
    assert second.try_acquire() is False
    assert second.renew() is False
    assert second.release() is False
    assert first.holder() == first.token


def test_acquiring_again_while_holding_returns_true_and_rearms_the_ttl(
    redis_client: redis.Redis,
) -> None:
    lease = LeaderLease(redis_client, KEY, "node-a", ttl=1)
    assert lease.try_acquire() is True
    redis_client.pexpire(KEY, 100)  # as if most of the TTL had passed

    assert lease.try_acquire() is True

    assert seconds_left(redis_client) > 0.5
    assert lease.holder() == lease.token


def test_a_stale_holder_can_neither_renew_nor_release_after_another_node_took_over(
    redis_client: redis.Redis,
) -> None:
    stale = LeaderLease(redis_client, KEY, "node-a", ttl=0.3)
    successor = LeaderLease(redis_client, KEY, "node-b", ttl=5)
    assert stale.try_acquire() is True

    # node-a "pauses" past its TTL; node-b takes over.
    assert wait_until(successor.try_acquire, timeout=3)

    assert stale.renew() is False
    assert stale.release() is False
    assert stale.try_acquire() is False
    assert redis_client.get(KEY) == successor.token.encode()
    assert seconds_left(redis_client) > 4  # the stale renew did not touch the TTL either


# -- expiry and renewal -------------------------------------------------------------------------


def test_a_standby_acquires_once_the_ttl_passes_without_renewal(
    redis_client: redis.Redis,
) -> None:
    leader = LeaderLease(redis_client, KEY, "node-a", ttl=0.3)
    standby = LeaderLease(redis_client, KEY, "node-b", ttl=0.3)
    started = time.monotonic()
    assert leader.try_acquire() is True
    assert standby.try_acquire() is False

    assert wait_until(standby.try_acquire, timeout=3)

    assert time.monotonic() - started >= 0.25
    assert leader.holder() == standby.token
    assert leader.renew() is False


def test_renewing_keeps_the_lease_for_several_ttls(redis_client: redis.Redis) -> None:
    leader = LeaderLease(redis_client, KEY, "node-a", ttl=0.3)
    standby = LeaderLease(redis_client, KEY, "node-b", ttl=0.3)
    assert leader.try_acquire() is True

    deadline = time.monotonic() + 1.2  # four TTLs
    while time.monotonic() < deadline:
        time.sleep(0.1)  # renew at TTL/3, as the scheduler does
        assert leader.renew() is True
        assert standby.try_acquire() is False

    assert leader.holder() == leader.token
    assert 0.2 < (leader.remaining() or 0) <= 0.3


def test_release_frees_the_lease_at_once_and_another_node_acquires_immediately(
    redis_client: redis.Redis,
) -> None:
    leader = LeaderLease(redis_client, KEY, "node-a", ttl=30)
    successor = LeaderLease(redis_client, KEY, "node-b", ttl=30)
    assert leader.try_acquire() is True

    assert leader.release() is True

    assert leader.holder() is None
    assert successor.try_acquire() is True
    assert leader.release() is False  # a second release finds someone else's lease
    assert successor.holder() == successor.token


# -- junk in the key ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "write_junk",
    [
        pytest.param(lambda client: client.set(KEY, "set-by-hand"), id="string"),
        pytest.param(lambda client: client.hset(KEY, "field", "value"), id="hash"),
        pytest.param(lambda client: client.rpush(KEY, "item"), id="list"),
    ],
)
def test_junk_without_expiry_is_cleared_by_acquire(
    redis_client: redis.Redis, write_junk: Callable[[redis.Redis], object]
) -> None:
    lease = LeaderLease(redis_client, KEY, "node-a", ttl=1)
    write_junk(redis_client)
    assert lease.remaining() == math.inf

    assert lease.try_acquire() is True

    assert redis_client.get(KEY) == lease.token.encode()
    assert 0 < seconds_left(redis_client) <= 1


def test_a_hash_with_a_ttl_blocks_without_errors_until_it_expires(
    redis_client: redis.Redis,
) -> None:
    lease = LeaderLease(redis_client, KEY, "node-a", ttl=1)
    redis_client.hset(KEY, "field", "value")
    redis_client.pexpire(KEY, 300)

    assert lease.try_acquire() is False
    assert lease.renew() is False
    assert lease.release() is False
    assert lease.holder() is None
    assert 0 < (lease.remaining() or 0) <= 0.3
    assert redis_client.type(KEY) == b"hash"  # release left it alone

    assert wait_until(lease.try_acquire, timeout=3)
    assert lease.holder() == lease.token


# -- Redis restarts and outages ------------------------------------------------------------------


def test_after_a_redis_restart_the_old_holder_cannot_renew_but_can_acquire_again(
    throwaway_redis: Any,
) -> None:
    client = redis.Redis.from_url(throwaway_redis.url, socket_timeout=2, socket_connect_timeout=2)
    leader = LeaderLease(client, KEY, "node-a", ttl=5)
    assert leader.try_acquire() is True
    assert leader.renew() is True

    throwaway_redis.restart()
    assert client.info("memory")["number_of_cached_scripts"] == 0

    assert leader.renew() is False  # the lease is gone with the data
    assert leader.holder() is None
    assert leader.try_acquire() is True  # scripts are reloaded on NOSCRIPT
    assert leader.renew() is True
    assert leader.holder() == leader.token
    assert leader.release() is True
    client.close()


@pytest.mark.parametrize("outage", ["stopped", "paused"])
def test_every_method_raises_lease_unavailable_quickly_while_redis_is_down_and_works_after(
    throwaway_redis: Any, own_client: redis.Redis, outage: str
) -> None:
    lease = LeaderLease(own_client, KEY, "node-a", ttl=5)
    assert lease.try_acquire() is True

    if outage == "stopped":
        throwaway_redis.stop()
    else:
        throwaway_redis.pause()
    for call in (lease.try_acquire, lease.renew, lease.release, lease.holder, lease.remaining):
        started = time.monotonic()
        with pytest.raises(LeaseUnavailable) as raised:
            call()
        assert time.monotonic() - started < 2, f"{call.__name__} hung"
        assert isinstance(
            raised.value.__cause__,
            (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError),
        )

    if outage == "stopped":
        throwaway_redis.restart()
    else:
        throwaway_redis.resume()
        # Commands that timed out were still queued in the paused server and run now; a ping on
        # a fresh connection returns after them.
        assert wait_until(lambda: bool(own_client.ping()), timeout=3)
    assert lease.try_acquire() is True
    assert lease.renew() is True
    assert lease.holder() == lease.token
    assert lease.release() is True


# -- construction -------------------------------------------------------------------------------


def test_from_settings_uses_the_configured_alias_prefix_and_ttl(
    settings: Any, redis_client: redis.Redis, throwaway_redis: Any
) -> None:
    settings.CACHES = {
        **settings.CACHES,
        "lease": {**settings.CACHES["default"], "LOCATION": throwaway_redis.url},
    }
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "REDIS_ALIAS": "lease",
        "KEY_PREFIX": "tenant-7",
        "LEASE_TTL": 2.5,
    }

    lease = LeaderLease.from_settings("node-a")
    assert lease.key == "tenant-7:leader"
    assert lease.ttl == 2.5
    assert lease.token.startswith("node-a:")
    assert lease.try_acquire() is True

    on_alias = redis.Redis.from_url(throwaway_redis.url, socket_timeout=2)
    assert on_alias.get("tenant-7:leader") == lease.token.encode()
    assert 0 < seconds_left(on_alias, "tenant-7:leader") <= 2.5
    assert redis_client.exists("tenant-7:leader") == 0  # not on the default alias's server
    on_alias.close()

    assert LeaderLease.from_settings("node-a", ttl=0.5).ttl == 0.5


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf")])
def test_a_ttl_that_is_not_a_positive_number_of_seconds_is_rejected(
    redis_client: redis.Redis, ttl: float
) -> None:
    with pytest.raises(ValueError, match="ttl"):
        LeaderLease(redis_client, KEY, "node-a", ttl=ttl)
