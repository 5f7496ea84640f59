"""The change signal: wake the schedulers at once when a job changes or the leader steps down.

Saving a job publishes a change after the transaction commits (Redis: a pub/sub message on
``<KEY_PREFIX>:changes``; PostgreSQL with the database lease: ``NOTIFY``; elsewhere nothing, and
the schedulers poll). The leader's sleep listens, so an edited job's new ``next_run_at`` is
honoured without a fixed tick, and a standby takes over right after a leader releases the lease.
Losing a message costs at most one sleep: every sleeper also has a timeout. Publishing never
raises.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from django.db import DatabaseError, connections, router
from django.db.backends.base.base import BaseDatabaseWrapper

from ..dbconn import behind_transaction_pooler, check_writable

if TYPE_CHECKING:  # redis-py is imported only where the Redis lease is used
    from ..leases.redis import RedisBackend


logger = logging.getLogger("django_cluster_cron.leases")

# A sleeper checks for shutdown at least this often even when no change comes.
WAIT_SLICE = 0.25
# PostgreSQL NOTIFY channel of the change signal.
CHANNEL = "cluster_cron_changes"


class Sleeper(Protocol):
    def wait(self, timeout: float, stop: threading.Event) -> bool:
        """Sleep until a change signal, ``timeout`` or ``stop``; True if a change woke it."""
        ...

    def close(self) -> None: ...


class ChangeSignal(Protocol):
    def publish(self, reason: str) -> None:
        """Wake the schedulers (a job changed, the leader let go). Never raises."""
        ...

    def sleeper(self, poll_interval: float) -> Sleeper:
        """What a scheduler sleeps on: woken by :meth:`publish` or its timeout."""
        ...


def wait_in_slices(timeout: float, stop: threading.Event, listen: Callable[[float], bool]) -> bool:
    """A sleeper's wait: ``listen(seconds)`` waits up to that long for a change (True if one came)
    and is called again until a change, ``timeout`` or ``stop``; True if a change woke it."""
    deadline = time.monotonic() + max(0.0, timeout)
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if listen(min(remaining, WAIT_SLICE)):
            return True
    return False


# -- Redis ---------------------------------------------------------------------------------------


class RedisChanges:
    def __init__(self, place: RedisBackend) -> None:
        self.place = place

    def channel(self) -> str:
        return self.place.key("changes")

    def publish(self, reason: str) -> None:
        try:
            self.place.client.publish(self.channel(), reason)
        except Exception as exc:  # Redis down: the scheduler notices on its next timed wake-up
            logger.debug("changes.publish_failed reason=%s error=%s", reason, exc)

    def sleeper(self, poll_interval: float) -> ChangeListener:
        return ChangeListener(self.place, self.channel())


class ChangeListener:
    """Sleeps until a change message on the channel, the timeout or ``stop``."""

    def __init__(self, place: RedisBackend, channel: str) -> None:
        self._place = place
        self._channel = channel
        self._pubsub: Any = None

    def _subscribe(self) -> Any:
        if self._pubsub is None:
            client: Any = self._place.client
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(self._channel)
            self._pubsub = pubsub
        return self._pubsub

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        """Return True if woken by a change message, False on timeout or stop."""

        def listen(seconds: float) -> bool:
            try:
                message = self._subscribe().get_message(timeout=seconds)
            except Exception:
                # Redis is unreachable: the scheduler's health log reports that; sleep instead.
                self.close()
                stop.wait(seconds)
                return False
            if message is None:
                return False
            self._drain()
            return True

        return wait_in_slices(timeout, stop, listen)

    def _drain(self) -> None:
        # Several saves in a row wake the scheduler once.
        try:
            while self._pubsub is not None and self._pubsub.get_message(timeout=0) is not None:
                pass
        except Exception:
            self.close()

    def close(self) -> None:
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            except Exception:
                logger.debug("changes.close_failed", exc_info=True)
            self._pubsub = None


# -- the database --------------------------------------------------------------------------------


def _alias() -> str:
    from ..models import SchedulerLease

    return router.db_for_write(SchedulerLease)


class DatabaseChanges:
    """PostgreSQL: ``NOTIFY``/``LISTEN``. Elsewhere nothing is sent and sleepers poll."""

    def publish(self, reason: str) -> None:
        connection = connections[_alias()]
        if connection.vendor != "postgresql":
            return
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, reason[:200]])
        except DatabaseError as exc:
            logger.debug("changes.publish_failed reason=%s error=%s", reason, exc)

    def sleeper(self, poll_interval: float) -> Sleeper:
        alias = _alias()
        if connections[alias].vendor != "postgresql":
            return PollingSleeper(poll_interval)
        if behind_transaction_pooler(alias):
            # LISTEN lives in a session: through a transaction-mode pooler it would sit on a
            # server connection lent to others, and hear nothing meant for this process.
            logger.warning(
                "changes.polling reason=pooler: PostgreSQL is reached through a transaction-mode "
                "pooler, where LISTEN cannot work; job changes are seen at the next poll "
                "(POLL_INTERVAL %.1fs)",
                poll_interval,
            )
            return PollingSleeper(poll_interval)
        return PostgresListener(alias, poll_interval)


class PollingSleeper:
    """No change channel: sleep at most ``poll_interval``, so the idle query sees edits then.

    The scheduler's idle tick is one query, so waking each poll interval costs one query per
    interval, whatever the number of jobs.
    """

    def __init__(self, poll_interval: float) -> None:
        self.poll_interval = poll_interval

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        stop.wait(max(0.0, min(timeout, self.poll_interval)))
        return False

    def close(self) -> None:
        pass


class PostgresListener:
    """``LISTEN`` on a connection of its own; woken by ``NOTIFY`` from any host's save.

    Falls back to :class:`PollingSleeper`'s behaviour while the connection is down, and listens
    again on a new one at its next wait: after the connection broke (the server ended it), or
    after :meth:`close` (the scheduler closes it with its other connections after a database
    error, so that a failover does not leave it listening to the old server).
    """

    def __init__(self, alias: str, poll_interval: float) -> None:
        self.alias = alias
        self.poll_interval = poll_interval
        self._wrapper: BaseDatabaseWrapper | None = None

    def _listening(self) -> Any:
        if self._wrapper is None:
            wrapper = connections.create_connection(self.alias)
            wrapper.ensure_connection()
            wrapper.set_autocommit(True)
            try:
                # Changes are announced on the server that takes writes: a primary demoted by
                # a failover would hear none of them (its LISTEN works).
                check_writable(wrapper)
                with wrapper.cursor() as cursor:
                    cursor.execute(f"LISTEN {CHANNEL}")
            except Exception:
                with contextlib.suppress(Exception):
                    wrapper.close()
                raise
            self._wrapper = wrapper
        return self._wrapper.connection

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        def listen(seconds: float) -> bool:
            try:
                return _notified(self._listening(), seconds)
            except Exception:  # the database is down: the scheduler reports it; poll meanwhile
                self.close()
                stop.wait(min(seconds, self.poll_interval))
                return False

        return wait_in_slices(timeout, stop, listen)

    def close(self) -> None:
        wrapper, self._wrapper = self._wrapper, None
        if wrapper is not None:
            with contextlib.suppress(Exception):
                wrapper.close()


def _notified(raw: Any, timeout: float) -> bool:
    """Wait up to ``timeout`` for notifications on a psycopg (3 or 2) connection; drain them."""
    notifies = getattr(raw, "notifies", None)
    if callable(notifies):  # psycopg 3
        got = False
        for _ in notifies(timeout=timeout, stop_after=1):
            got = True
        if got:  # several saves in a row wake the scheduler once
            for _ in notifies(timeout=0.0):
                pass
        return got
    # psycopg2: wait for the socket, then poll
    if not raw.notifies:
        ready, _, _ = select.select([raw], [], [], timeout)
        if ready:
            raw.poll()
    got = bool(raw.notifies)
    raw.notifies.clear()
    return got


# -- memory (tests) ------------------------------------------------------------------------------


class MemoryChanges:
    """Wakes the sleepers of this process only."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._generation = 0

    def publish(self, reason: str) -> None:
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    def sleeper(self, poll_interval: float) -> MemorySleeper:
        return MemorySleeper(self)

    def wait_for_change(self, seen: int, timeout: float) -> int:
        with self._changed:
            self._changed.wait_for(lambda: self._generation != seen, timeout=timeout)
            return self._generation

    @property
    def generation(self) -> int:
        with self._changed:
            return self._generation


class MemorySleeper:
    """Woken by :meth:`MemoryChanges.publish`."""

    def __init__(self, changes: MemoryChanges) -> None:
        self.changes = changes
        self._seen = changes.generation

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        def listen(seconds: float) -> bool:
            generation = self.changes.wait_for_change(self._seen, seconds)
            woken, self._seen = generation != self._seen, generation
            return woken

        return wait_in_slices(timeout, stop, listen)

    def close(self) -> None:
        pass
