"""The leader lease: one Redis key that names which scheduler process leads.

The key holds an *owner token*, ``"<node id>:<random hex>"``, fresh for every :class:`LeaderLease`
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

The lease is for liveness and efficiency only: it keeps standbys idle and bounds failover time.
It is *not* what makes a slot run once. A paused leader can wake up believing it still leads, and
a call can block for the client's full retry policy; correctness lives in the database (unique
constraints, conditional updates and a fencing epoch that only grows). Never act on "I hold the
lease" alone.

Redis being unreachable (refused, reset, timed out) surfaces as :class:`LeaseUnavailable` from
every method, so the caller can log once and back off. Any other Redis error is a bug and is
not translated.
"""

from __future__ import annotations

import math
import threading
import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from redis.commands.core import Script

__all__ = ["LeaderLease", "LeaseUnavailable"]


class LeaseUnavailable(Exception):
    """Redis could not be reached (connection refused, timeout, reset). Wraps the redis-py error."""


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


class LeaderLease:
    """A Redis lease owned by one process, identified by a fresh owner token.

    ``ttl`` is in seconds (sub-second values are fine; Redis keeps milliseconds). The object
    holds no state about whether it leads: every answer comes from Redis.
    """

    def __init__(self, client: redis.Redis, key: str, node_id: str, ttl: float) -> None:
        if not key:
            raise ValueError("the lease key must be a non-empty string")
        if not node_id:
            raise ValueError("node_id must be a non-empty string")
        if not math.isfinite(ttl) or ttl < 0.001:
            raise ValueError(f"ttl must be a finite number of seconds >= 0.001, got {ttl!r}")
        self.client = client
        self.key = key
        self.node_id = node_id
        self.ttl = float(ttl)
        self.token = f"{node_id}:{uuid.uuid4().hex}"
        self._ttl_ms = max(1, round(self.ttl * 1000))
        self._scripts = _scripts_for(client)

    @classmethod
    def from_settings(cls, node_id: str, ttl: float | None = None) -> LeaderLease:
        """The lease on the configured django-redis alias, key ``<KEY_PREFIX>:leader``."""
        from django_redis import get_redis_connection

        from django_cluster_cron.conf import app_settings

        client: redis.Redis = get_redis_connection(app_settings.REDIS_ALIAS)
        return cls(
            client,
            key=f"{app_settings.KEY_PREFIX}:leader",
            node_id=node_id,
            ttl=app_settings.LEASE_TTL if ttl is None else ttl,
        )

    def __repr__(self) -> str:
        return f"<LeaderLease key={self.key!r} token={self.token!r} ttl={self.ttl:g}s>"

    def try_acquire(self) -> bool:
        """Take the lease if it is free (or re-arm it if it is already ours); True if we hold it.

        Safe to retry after a timeout: if the first attempt did reach Redis, the retry finds our
        own token and re-arms it.
        """
        with self._redis_errors():
            result = self._scripts.acquire(keys=[self.key], args=[self.token, self._ttl_ms])
        return bool(result)

    def renew(self, ttl: float | None = None) -> bool:
        """Re-arm the TTL (or set it to ``ttl`` seconds) if the lease is still ours.

        False if it expired or another holds it. A cluster lock's ``at_least`` uses ``ttl`` to
        keep a released lock held for the rest of its minimum time.
        """
        ttl_ms = self._ttl_ms if ttl is None else max(1, round(ttl * 1000))
        with self._redis_errors():
            result = self._scripts.renew(keys=[self.key], args=[self.token, ttl_ms])
        return bool(result)

    def release(self) -> bool:
        """Delete the lease if it is ours (never another holder's); True if we deleted it."""
        with self._redis_errors():
            result = self._scripts.release(keys=[self.key], args=[self.token])
        return bool(result)

    def holder(self) -> str | None:
        """The token in the key (it starts with the holder's node id), or None if it is free.

        Also None while the key holds something that is not a token (another type), which
        :meth:`try_acquire` treats as taken until it expires.
        """
        with self._redis_errors():
            value = self._scripts.holder(keys=[self.key])
        if value is None:
            return None
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        return str(value)

    def remaining(self) -> float | None:
        """Seconds until the key expires; None if it is free, ``math.inf`` if it has no expiry."""
        with self._redis_errors():
            pttl = int(self.client.pttl(self.key))
        if pttl == -2:
            return None
        if pttl == -1:
            return math.inf
        return pttl / 1000

    @contextmanager
    def _redis_errors(self) -> Iterator[None]:
        try:
            yield
        except _UNAVAILABLE as exc:
            raise LeaseUnavailable(
                f"Redis unreachable for lease {self.key!r}: {type(exc).__name__}: {exc}"
            ) from exc
