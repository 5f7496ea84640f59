"""The Redis lease against a real Redis: junk keys, restarts, outages, settings.

What every backend promises (ownership, expiry, renewal, release) is in test_lease_contract.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_cluster_cron.leases import get_backend
from django_cluster_cron.leases.redis import LeaseUnavailable, RedisLease
from tests.support.netfault import links  # noqa: F401 (fixture)
from tests.support.waiting import wait_for

KEY = "test-lease:leader"


def seconds_left(client: redis.Redis, key: str = KEY) -> float:
    return int(client.pttl(key)) / 1000


@pytest.fixture
def own_client(throwaway_redis: Any) -> Iterator[redis.Redis]:
    """A client to ``throwaway_redis`` that gives up soon: 1 s timeouts (long enough for a
    loaded machine's server to answer when it is up), no retries."""
    client = redis.Redis.from_url(
        throwaway_redis.url,
        socket_timeout=1,
        socket_connect_timeout=1,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        yield client
    finally:
        client.close()


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
    lease = RedisLease(redis_client, KEY, "node-a", ttl=1)
    write_junk(redis_client)
    assert lease.remaining() == math.inf

    assert lease.try_acquire() is True

    assert redis_client.get(KEY) == lease.token.encode()
    assert 0 < seconds_left(redis_client) <= 1


def test_a_hash_with_a_ttl_blocks_without_errors_until_it_expires(
    redis_client: redis.Redis,
) -> None:
    lease = RedisLease(redis_client, KEY, "node-a", ttl=1)
    redis_client.hset(KEY, "field", "value")
    redis_client.pexpire(KEY, 2000)  # the five calls below see it even on a stalled machine

    assert lease.try_acquire() is False
    assert lease.renew() is False
    assert lease.release() is False
    assert lease.holder() is None
    assert 0 < (lease.remaining() or 0) <= 2
    assert redis_client.type(KEY) == b"hash"  # release left it alone

    wait_for(lease.try_acquire, 10, "the hash's TTL to run out")
    assert lease.holder() == lease.token


# -- Redis restarts and outages ------------------------------------------------------------------


def test_after_a_redis_restart_the_old_holder_cannot_renew_but_can_acquire_again(
    throwaway_redis: Any,
) -> None:
    client = redis.Redis.from_url(throwaway_redis.url, socket_timeout=2, socket_connect_timeout=2)
    leader = RedisLease(client, KEY, "node-a", ttl=5)
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
    lease = RedisLease(own_client, KEY, "node-a", ttl=5)
    assert lease.try_acquire() is True

    if outage == "stopped":
        throwaway_redis.stop()
    else:
        throwaway_redis.pause()
    for call in (lease.try_acquire, lease.renew, lease.release, lease.holder, lease.remaining):
        started = time.monotonic()
        with pytest.raises(LeaseUnavailable) as raised:
            call()
        assert time.monotonic() - started < 5, f"{call.__name__} hung"
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
        wait_for(own_client.ping, 10, "the resumed server to answer a ping")
    assert lease.try_acquire() is True
    assert lease.renew() is True
    assert lease.holder() == lease.token
    assert lease.release() is True


# -- construction -------------------------------------------------------------------------------


def test_the_backend_uses_the_configured_alias_and_prefix(
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

    backend = get_backend()
    assert backend.name == "redis"
    lease = backend.lease("leader", "node-a", 2.5)
    assert isinstance(lease, RedisLease)
    assert lease.key == "tenant-7:leader"
    assert lease.ttl == 2.5
    assert lease.token.startswith("node-a:")
    assert lease.try_acquire() is True

    on_alias = redis.Redis.from_url(throwaway_redis.url, socket_timeout=2)
    assert on_alias.get("tenant-7:leader") == lease.token.encode()
    assert 0 < seconds_left(on_alias, "tenant-7:leader") <= 2.5
    assert redis_client.exists("tenant-7:leader") == 0  # not on the default alias's server
    on_alias.close()


def test_without_a_socket_timeout_in_the_cache_the_lease_bounds_its_own_waits(
    redis_url,
    links,  # noqa: F811 (the fixture)
):
    """redis-py before 8 waits without bound by default: the lease copies such a pool with
    timeouts, so a link gone silent fails its renewal instead of blocking the scheduler."""
    import redis as redis_py

    from django_cluster_cron.leases import LeaseUnavailable
    from django_cluster_cron.leases.redis import (
        SOCKET_TIMEOUTS,
        RedisBackend,
        bounded,
        waits_unbounded,
    )
    from tests.support.netfault import url_through

    link = links(redis_url)
    pool = redis_py.ConnectionPool.from_url(url_through(redis_url, link), socket_timeout=None)
    project_client = redis_py.Redis(connection_pool=pool)
    assert waits_unbounded(project_client)
    client = bounded(project_client)
    assert bounded(project_client) is client  # one pool of its own per pool of the project
    assert not waits_unbounded(client)
    assert (
        client.connection_pool.connection_kwargs["socket_timeout"]
        == (SOCKET_TIMEOUTS["socket_timeout"])
    )
    assert pool.connection_kwargs["socket_timeout"] is None  # the project's own is unchanged
    lease = RedisBackend(client=client, prefix="test-bounded").lease("leader", "node-a", ttl=30)
    assert lease.try_acquire()
    link.silence()
    with pytest.raises(LeaseUnavailable, match="Timeout"):
        lease.renew()

    # A Unix socket has no TCP keepalive to ask for; a pool that bounds its waits is kept.
    unix_pool = redis_py.ConnectionPool.from_url("unix:///nowhere.sock", socket_timeout=None)
    unix = redis_py.Redis(connection_pool=unix_pool)
    assert "socket_keepalive" not in bounded(unix).connection_pool.connection_kwargs
    given = redis_py.Redis.from_url(redis_url, socket_timeout=3)
    assert bounded(given) is given


# -- a Redis with replicas, and a key lost in its failover (issue 45) ---------------------------


@pytest.fixture
def replica_of(throwaway_redis: Any) -> Iterator[Any]:
    """A replica of ``throwaway_redis``, its link up."""
    from tests.conftest import devredis

    replica = devredis.RedisServer(
        extra_args=["--replicaof", "127.0.0.1", str(throwaway_redis.port)]
    ).start()
    client = redis.Redis.from_url(replica.url, socket_timeout=2)
    try:
        wait_for(
            lambda: client.info("replication").get("master_link_status") == "up",
            30,
            "the replica's link to its master",
        )
        yield replica
    finally:
        client.close()
        replica.stop()


def waits_issued(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def test_a_lease_write_waits_for_a_replica_where_the_redis_has_one(
    throwaway_redis: Any, replica_of: Any
) -> None:
    """So that a replica promoted by a failover holds the key more often (Redis replicates
    asynchronously: without WAIT a promote can lose a lease write that was acknowledged)."""
    client = redis.Redis.from_url(throwaway_redis.url, socket_timeout=2)
    replica = redis.Redis.from_url(replica_of.url, socket_timeout=2)
    try:
        lease = RedisLease(client, KEY, "node-a", ttl=5)
        assert lease.try_acquire() is True
        assert lease.renew() is True
        assert waits_issued(client) == 2
        assert replica.get(KEY) == lease.token.encode()
    finally:
        client.close()
        replica.close()


def test_a_redis_without_replicas_is_not_asked_to_wait(throwaway_redis: Any) -> None:
    client = redis.Redis.from_url(throwaway_redis.url, socket_timeout=2)
    try:
        lease = RedisLease(client, KEY, "node-a", ttl=5)
        assert lease.try_acquire() is True
        assert lease.renew() is True
        assert waits_issued(client) == 0
    finally:
        client.close()


def test_a_master_demoted_in_place_is_left_for_whatever_the_address_names_now(
    throwaway_redis: Any,
) -> None:
    """A Sentinel-style failover without a disconnect: the old master becomes a replica of the
    new one (its connections kept, every write answered READONLY) while the address the app uses
    names the new master. The lease fails once, drops its pooled connections, and the next
    attempt takes the lease on the new master (it never stays on the demoted server)."""
    from tests.conftest import devredis
    from tests.support.netfault import FaultyLink

    new_master = devredis.RedisServer().start()
    link = FaultyLink(throwaway_redis.port)
    client = redis.Redis(host="127.0.0.1", port=link.port, socket_timeout=2)
    old = redis.Redis.from_url(throwaway_redis.url, socket_timeout=2)
    try:
        lease = RedisLease(client, KEY, "node-a", ttl=30)
        assert lease.try_acquire() is True
        old.replicaof("127.0.0.1", new_master.port)
        link.retarget(new_master.port)
        with pytest.raises(LeaseUnavailable, match="ReadOnlyError"):
            lease.renew()
        assert lease.try_acquire() is True
        assert redis.Redis.from_url(new_master.url).get(KEY) == lease.token.encode()
    finally:
        client.close()
        old.close()
        link.close()
        new_master.stop()
