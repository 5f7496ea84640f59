"""The Redis lease backend: a lease is one Redis key holding its owner's token.

The key holds an *owner token*, ``"<node id>:<random hex>"``, fresh for every :class:`RedisLease`
(so for every process, even two on one host with the same node id). Acquire is ``SET key token NX
PX ttl``; renew and release are compare-and-act Lua scripts that touch the key only while it
still holds our token. Why both:

* A plain ``PEXPIRE`` or ``DEL`` by a process that was paused (GC, SIGSTOP, a VM migration) past
  its TTL would extend or delete the lease of the node that took over meanwhile. The token tells
  "my lease" from "the lease"; Lua makes the compare and the act one atomic step.
* The acquire script also repairs the key: a value with no expiry (someone ran ``SET`` by hand,
  or ``PERSIST``) would otherwise block leadership forever, so it is deleted first. A key of
  another type with a TTL only means "not acquired" until it expires; no script ever lets a
  WRONGTYPE error escape.

Redis reports a key's time-to-live itself (``PX``), so no host clock takes part. Redis is reached
through django-redis (``get_redis_connection(REDIS_ALIAS)``): Sentinel, TLS and auth come from the
project's cache configuration. When that configuration bounds no wait (no socket timeout), the
lease and its coordination use a pool of their own to the same server that does
(:data:`SOCKET_TIMEOUTS`, :func:`bounded`), so a silent link fails instead of blocking.

Redis being unreachable (refused, reset, timed out) surfaces as :class:`LeaseUnavailable` from
every method, so the caller can log once and back off. Any other Redis error is a bug and is
not translated.
"""

from __future__ import annotations

import inspect
import logging
import math
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from .base import HeldLease, LeaseUnavailable, check_lease_args, new_token

__all__ = ["LeaseUnavailable", "RedisBackend", "RedisLease", "redis_errors"]

logger = logging.getLogger("django_cluster_cron.leases")

# The cluster page lists at most this many locks.
SCAN_LIMIT = 500

# What the lease's own Redis connections wait for at most when the cache configuration sets no
# socket timeout: connecting, and an answer that never comes (a link gone silent); TCP keepalive
# on top. Like the database's (django_cluster_cron.dbconn), set so that a scheduler cut off gives
# up and lets another node lead instead of blocking for the many minutes the kernel would wait.
SOCKET_TIMEOUTS: dict[str, Any] = {
    "socket_connect_timeout": 5,
    "socket_timeout": 10,
    "socket_keepalive": True,
}


# Errors that mean "Redis cannot serve us right now", not "we sent something wrong". Besides
# connection errors and timeouts (and raw socket errors): a replica answering after a failover
# (READONLY) and a replica cut off from its master (MASTERDOWN) are outages too.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.MasterDownError,
    OSError,
)

# KEYS[1] = lease key, ARGV[1] = our token, ARGV[2] = TTL in milliseconds. Returns 1 if we hold it.
_ACQUIRE = """
local key, token, ttl = KEYS[1], ARGV[1], ARGV[2]
local kind = redis.call('TYPE', key)['ok']
if kind ~= 'none' then
    if redis.call('PTTL', key) == -1 then
        -- No expiry: not a lease we wrote. Left alone it would block leadership forever.
        redis.call('DEL', key)
    elseif kind ~= 'string' then
        return 0
    elseif redis.call('GET', key) == token then
        redis.call('PEXPIRE', key, ttl)
        return 1
    else
        return 0
    end
end
if redis.call('SET', key, token, 'NX', 'PX', ttl) then
    return 1
end
return 0
"""

# Same KEYS/ARGV. Re-arms the TTL only while the key still holds our token.
_RENEW = """
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS[1] = lease key, ARGV[1] = our token. Deletes the key only while it holds our token.
_RELEASE = """
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS[1] = lease key. The stored token, or nil when the key is missing or not a string.
_HOLDER = """
if redis.call('TYPE', KEYS[1])['ok'] == 'string' then
    return redis.call('GET', KEYS[1])
end
return false
"""


@dataclass(frozen=True)
class _Scripts:
    acquire: Script
    renew: Script
    release: Script
    holder: Script


# One set of registered scripts per client. Script objects run EVALSHA and, on NOSCRIPT (a
# restarted or flushed server), load the source and retry, so registering once is enough.
_scripts_by_client: weakref.WeakKeyDictionary[redis.Redis, _Scripts] = weakref.WeakKeyDictionary()
_scripts_lock = threading.Lock()


def _scripts_for(client: redis.Redis) -> _Scripts:
    with _scripts_lock:
        scripts = _scripts_by_client.get(client)
        if scripts is None:
            scripts = _Scripts(
                acquire=client.register_script(_ACQUIRE),
                renew=client.register_script(_RENEW),
                release=client.register_script(_RELEASE),
                holder=client.register_script(_HOLDER),
            )
            _scripts_by_client[client] = scripts
        return scripts


# How long a lease write waits for a replica to acknowledge it (milliseconds), and how often a
# process looks again at whether its Redis has replicas (seconds).
REPLICA_WAIT_MS = 100
REPLICAS_RECHECK = 60.0
_replicas: weakref.WeakKeyDictionary[Any, tuple[float, bool]] = weakref.WeakKeyDictionary()


def has_replicas(client: redis.Redis) -> bool:
    """Whether ``client``'s Redis has a replica connected (``INFO replication``), looked up at
    most every REPLICAS_RECHECK seconds; False when it cannot be told."""
    now = time.monotonic()
    pool = client.connection_pool
    found = _replicas.get(pool)
    if found is not None and now - found[0] < REPLICAS_RECHECK:
        return found[1]
    try:
        info = client.info("replication")
        replicas = int(info.get("connected_slaves", 0)) > 0 and info.get("role") == "master"
    except Exception:  # an old or restricted Redis: no waiting
        replicas = False
    _replicas[pool] = (now, replicas)
    return replicas


class RedisLease:
    """A Redis lease owned by one process, identified by a fresh owner token.

    ``ttl`` is in seconds (sub-second values are fine; Redis keeps milliseconds). The object
    holds no state about whether it leads: every answer comes from Redis.
    """

    def __init__(
        self, client: redis.Redis, key: str, node_id: str, ttl: float, *, name: str | None = None
    ) -> None:
        check_lease_args(key, node_id, ttl)
        self.client = client
        self.key = key
        self.name = name or key
        self.node_id = node_id
        self.ttl = float(ttl)
        self.token = new_token(node_id)
        self._ttl_ms = max(1, round(self.ttl * 1000))
        self._scripts = _scripts_for(client)

    def __repr__(self) -> str:
        return f"<RedisLease key={self.key!r} token={self.token!r} ttl={self.ttl:g}s>"

    def try_acquire(self) -> bool:
        """Take the lease if it is free (or re-arm it if it is already ours); True if we hold it.

        Safe to retry after a timeout: if the first attempt did reach Redis, the retry finds our
        own token and re-arms it.
        """
        with self.redis_errors():
            result = self._scripts.acquire(keys=[self.key], args=[self.token, self._ttl_ms])
        if result:
            self._replicated()
        return bool(result)

    def renew(self, ttl: float | None = None) -> bool:
        """Re-arm the TTL (or set it to ``ttl`` seconds) if the lease is still ours.

        False if it expired or another holds it. A cluster lock's ``at_least`` uses ``ttl`` to
        keep a released lock held for the rest of its minimum time.
        """
        ttl_ms = self._ttl_ms if ttl is None else max(1, round(ttl * 1000))
        with self.redis_errors():
            result = self._scripts.renew(keys=[self.key], args=[self.token, ttl_ms])
        if result:
            self._replicated()
        return bool(result)

    def _replicated(self) -> None:
        """Where this Redis has replicas, wait (briefly) for one to have the lease's write: a
        replica promoted by a failover then holds the key more often, instead of handing the
        lease to a second node while the first still leads (the epoch fences the writes either
        way). Bounded: a replica that does not answer delays nothing much."""
        if not has_replicas(self.client):
            return
        try:
            acknowledged = self.client.wait(1, REPLICA_WAIT_MS)
        except Exception as exc:  # a statistic of safety, not a condition of the lease
            logger.debug("lease.replica_wait_failed key=%s error=%s", self.key, exc)
            return
        if not acknowledged:
            logger.info("lease.not_replicated key=%s wait_ms=%s", self.key, REPLICA_WAIT_MS)

    def release(self) -> bool:
        """Delete the lease if it is ours (never another holder's); True if we deleted it."""
        with self.redis_errors():
            result = self._scripts.release(keys=[self.key], args=[self.token])
        return bool(result)

    def holder(self) -> str | None:
        """The token in the key (it starts with the holder's node id), or None if it is free.

        Also None while the key holds something that is not a token (another type), which
        :meth:`try_acquire` treats as taken until it expires.
        """
        with self.redis_errors():
            value = self._scripts.holder(keys=[self.key])
        if value is None:
            return None
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        return str(value)

    def remaining(self) -> float | None:
        """Seconds until the key expires; None if it is free, ``math.inf`` if it has no expiry."""
        with self.redis_errors():
            pttl = int(self.client.pttl(self.key))
        if pttl == -2:
            return None
        if pttl == -1:
            return math.inf
        return pttl / 1000

    def redis_errors(self) -> Any:
        return redis_errors(f"lease {self.key!r}", self.client)


class RedisBackend:
    """Leases in the project's Redis (a django-redis cache alias): keys ``<KEY_PREFIX>:leader``
    and ``<KEY_PREFIX>:lock:<name>``. The client and the key prefix serve the coordination
    kept beside them too (:mod:`django_cluster_cron.coordination`)."""

    name = "redis"
    fences_in_lease = False

    def __init__(self, client: redis.Redis | None = None, prefix: str | None = None) -> None:
        self._client = client
        self._prefix = prefix

    @property
    def client(self) -> redis.Redis:
        if self._client is not None:
            return self._client
        from django_redis import get_redis_connection

        from ..conf import app_settings

        return bounded(get_redis_connection(app_settings.REDIS_ALIAS))

    def key(self, suffix: str) -> str:
        if self._prefix is not None:
            return f"{self._prefix}:{suffix}"
        from ..conf import app_settings

        return f"{app_settings.KEY_PREFIX}:{suffix}"

    def lease(self, name: str, node_id: str, ttl: float) -> RedisLease:
        return RedisLease(self.client, self.key(name), node_id, ttl, name=name)

    def held(self, prefix: str) -> list[HeldLease]:
        client = self.client
        full = self.key(prefix)
        found: list[HeldLease] = []
        with redis_errors("listing leases", client):
            for raw_key in client.scan_iter(match=full + "*", count=100):
                try:
                    owner = client.get(raw_key)
                except redis.exceptions.ResponseError:  # junk of another type: show it
                    owner = b"(not a lease, wrong type)"
                pttl = client.pttl(raw_key)
                found.append(
                    HeldLease(
                        name=_text(raw_key)[len(full) :],
                        owner=_text(owner) if owner is not None else "?",
                        ttl=pttl / 1000 if pttl and pttl > 0 else None,
                    )
                )
                if len(found) >= SCAN_LIMIT:
                    break
        return sorted(found, key=lambda held: held.name)

    def force_release(self, name: str) -> bool:
        with redis_errors(f"releasing {name!r}", self.client):
            return bool(self.client.delete(self.key(name)))

    def release_held_by(self, name: str, token: str) -> bool:
        client = self.client
        with redis_errors(f"releasing {name!r}", client):
            return bool(_scripts_for(client).release(keys=[self.key(name)], args=[token]))


_bounded: weakref.WeakKeyDictionary[Any, redis.Redis] = weakref.WeakKeyDictionary()
_bounded_lock = threading.Lock()


def bounded(client: redis.Redis) -> redis.Redis:
    """``client`` if its connections bound their waits; else a client of the same server (one pool
    per original pool) whose connections add :data:`SOCKET_TIMEOUTS`. Only a plain
    ``ConnectionPool`` is copied: a Sentinel or custom pool is left as configured (the deployment
    check W007 asks for the timeouts in ``CACHES``)."""
    pool = client.connection_pool
    found = _bounded.get(pool)  # decided once per pool: the lease asks for its client often
    if found is not None:
        return found
    with _bounded_lock:
        found = _bounded.get(pool)
        if found is None:
            found = _copy_with_timeouts(client) or client
            _bounded[pool] = found
    return found


def _copy_with_timeouts(client: redis.Redis) -> redis.Redis | None:
    """A client on a copy of ``client``'s plain pool with :data:`SOCKET_TIMEOUTS` added, or None
    when its waits are bounded already or its pool is not one to copy."""
    pool = client.connection_pool
    kwargs = getattr(pool, "connection_kwargs", None)
    if type(pool) is not redis.ConnectionPool or not isinstance(kwargs, dict):
        return None
    if not waits_unbounded(client):
        return None
    extra = {k: v for k, v in SOCKET_TIMEOUTS.items() if _setting(pool, k) is None}
    if not issubclass(pool.connection_class, redis.Connection):
        extra.pop("socket_keepalive", None)  # a Unix socket has no TCP keepalive
    copy = redis.ConnectionPool(
        connection_class=pool.connection_class,
        max_connections=pool.max_connections,
        **{**kwargs, **extra},
    )
    return type(client)(connection_pool=copy)


def waits_unbounded(client: redis.Redis) -> bool:
    """Whether ``client``'s connections would wait without bound for an answer (no socket
    timeout: the cache configuration sets none, and redis-py before 8 sets none by default)."""
    return _setting(client.connection_pool, "socket_timeout") is None


def _setting(pool: Any, name: str) -> Any:
    """A connection setting of ``pool``: as given, or the connection class's default."""
    kwargs = getattr(pool, "connection_kwargs", None) or {}
    if name in kwargs:
        return kwargs[name]
    for klass in getattr(pool, "connection_class", type(None)).__mro__:
        init = vars(klass).get("__init__")
        parameter = None if init is None else inspect.signature(init).parameters.get(name)
        if parameter is not None and parameter.default is not inspect.Parameter.empty:
            return parameter.default
    return None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


# A server that answers but cannot take our writes: a master demoted to a replica by a failover
# (its connections kept: Sentinel, a DNS name or a proxy now naming the new master) or a replica
# cut off from its master. Like a read-only database, its connections are dead to us.
_WRONG_SERVER = (redis.exceptions.ReadOnlyError, redis.exceptions.MasterDownError)


@contextmanager
def redis_errors(what: str, client: Any = None) -> Iterator[None]:
    """Redis's outages as :class:`LeaseUnavailable`. A server that refuses our writes also drops
    ``client``'s pooled connections, so that the next command connects to whatever the address
    names now instead of reusing one that stays on the demoted server."""
    try:
        yield
    except _UNAVAILABLE as exc:
        if client is not None and isinstance(exc, _WRONG_SERVER):
            with suppress(Exception):
                client.connection_pool.disconnect()
        raise LeaseUnavailable(f"Redis unreachable ({what}): {type(exc).__name__}: {exc}") from exc
