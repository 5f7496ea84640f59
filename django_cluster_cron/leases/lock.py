"""A cluster-wide lock for any function: one holder at a time across every host.

    from django_cluster_cron.locks import cluster_lock, SKIPPED

    @cluster_lock(ttl=60)                       # name: the function's dotted path
    def rebuild_search_index(): ...             # returns SKIPPED if another host holds it

    @cluster_lock("reports", ttl=30, at_least=10, blocking=True, timeout=5)
    def nightly_report(): ...

    with cluster_lock("migrate-tenants", ttl=120):   # raises LockNotAcquired if held
        ...

Mechanics: the lock is a lease named ``lock:<name>`` on the configured lease backend (a Redis key
``<KEY_PREFIX>:lock:<name>`` or a row of the lease table; see :mod:`django_cluster_cron.leases`)
holding an owner token. It is extended or released only while it still holds that token (the
same compare-and-act operations as the scheduler's lease), so a holder that was paused past its
TTL can never extend or delete the next holder's lock. While the body runs, a heartbeat thread
extends the TTL every ``heartbeat`` seconds (default TTL/4, always below TTL/3), so a body longer
than the TTL stays protected, and a crashed holder's lock still expires after one TTL. ``at_least``
(ShedLock's *lockAtLeastFor*) keeps the lock held until that many seconds after it was taken even
if the body finished sooner, so hosts whose clocks or schedules differ slightly do not run the
same periodic body twice.

When the backend cannot be reached the body never runs unguarded: the lock raises
:class:`LockUnavailable`, or with ``on_unavailable="skip"`` logs ``lock.unavailable`` and skips.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar, overload

from .base import LOCK_PREFIX, Lease, LeaseBackend, LeaseUnavailable

logger = logging.getLogger("django_cluster_cron.locks")

P = ParamSpec("P")
R = TypeVar("R")


class _Skipped:
    """Returned by a decorated function whose lock was held elsewhere (or its backend down)."""

    _instance: _Skipped | None = None

    def __new__(cls) -> _Skipped:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SKIPPED"

    def __bool__(self) -> bool:
        return False


SKIPPED = _Skipped()


class LockNotAcquired(Exception):
    """Another holder has the lock (and ``blocking`` was off or ``timeout`` ran out)."""


class LockUnavailable(Exception):
    """The lease backend could not be reached, so the lock was not taken: the body did not run."""


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class ClusterLock:
    """A lock on ``name``; use it as a context manager or call ``acquire``/``release``."""

    def __init__(
        self,
        name: str,
        *,
        ttl: float = 60.0,
        at_least: float = 0.0,
        blocking: bool = False,
        timeout: float | None = None,
        heartbeat: float | None = None,
        on_unavailable: Literal["raise", "skip"] = "raise",
        backend: LeaseBackend | None = None,
    ) -> None:
        if not name:
            raise ValueError("a cluster lock needs a name")
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl!r}")
        if at_least < 0:
            raise ValueError(f"at_least must be >= 0, got {at_least!r}")
        heartbeat = ttl / 4 if heartbeat is None else heartbeat
        if not 0 < heartbeat < ttl / 3:
            raise ValueError(
                f"heartbeat must be between 0 and ttl/3 ({ttl / 3:g}s), got {heartbeat}"
            )
        if on_unavailable not in ("raise", "skip"):
            raise ValueError("on_unavailable must be 'raise' or 'skip'")
        self.name = name
        self.ttl = ttl
        self.at_least = at_least
        self.blocking = blocking
        self.timeout = timeout
        self.heartbeat = heartbeat
        self.on_unavailable = on_unavailable
        self._backend = backend
        self._lease: Lease | None = None
        self._acquired_at = 0.0
        self._stop_heartbeat = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self.lost = threading.Event()  # set if a heartbeat found the lock taken or expired

    @property
    def lease_name(self) -> str:
        return LOCK_PREFIX + self.name

    def _make_lease(self) -> Lease:
        backend = self._backend
        if backend is None:
            from . import get_backend

            backend = get_backend()
        return backend.lease(self.lease_name, _owner(), self.ttl)

    @property
    def token(self) -> str | None:
        return self._lease.token if self._lease else None

    def acquire(self) -> bool:
        """Take the lock (waiting if ``blocking``, up to ``timeout``); start the heartbeat.

        Raises :class:`LockUnavailable` if the lease backend cannot be reached.
        """
        lease = self._make_lease()
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        pause = min(0.05, self.ttl / 10)
        while True:
            try:
                acquired = lease.try_acquire()
            except LeaseUnavailable as exc:
                logger.error("lock.unavailable name=%s error=%s", self.name, exc)
                raise LockUnavailable(str(exc)) from exc
            if acquired:
                break
            if not self.blocking or (deadline is not None and time.monotonic() >= deadline):
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.5, self.ttl / 3)
        self._lease = lease
        self._acquired_at = time.monotonic()
        self.lost.clear()
        self._stop_heartbeat.clear()
        self._heartbeat_thread = threading.Thread(
            target=self._beat, name=f"cluster-lock-{self.name}", daemon=True
        )
        self._heartbeat_thread.start()
        logger.debug("lock.acquired name=%s token=%s", self.name, lease.token)
        return True

    def _beat(self) -> None:
        lease = self._lease
        assert lease is not None
        try:
            while not self._stop_heartbeat.wait(self.heartbeat):
                try:
                    still_ours = lease.renew()
                except LeaseUnavailable as exc:
                    logger.warning("lock.heartbeat_failed name=%s error=%s", self.name, exc)
                    continue
                if not still_ours:
                    logger.error("lock.lost name=%s: it expired or was taken meanwhile", self.name)
                    self.lost.set()
                    return
        finally:
            from .database import close_private_connection

            close_private_connection()  # the database backend's connection of this thread

    def release(self) -> None:
        """Stop the heartbeat and release the lock if it is still ours (honouring at_least)."""
        lease = self._lease
        if lease is None:
            return
        self._stop_heartbeat.set()
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join()
        self._lease = None
        held_for = time.monotonic() - self._acquired_at
        try:
            if held_for < self.at_least:
                lease.renew(ttl=self.at_least - held_for)
            else:
                lease.release()
        except LeaseUnavailable as exc:
            # It expires by itself within one TTL; nothing else can be done without Redis.
            logger.warning("lock.release_failed name=%s error=%s", self.name, exc)

    def __enter__(self) -> ClusterLock:
        if not self.acquire():
            raise LockNotAcquired(f"cluster lock {self.name!r} is held by another owner")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class cluster_lock:
    """Decorator and context manager around :class:`ClusterLock`.

    As a decorator, a call whose lock is held elsewhere returns :data:`SKIPPED` (logged as
    ``lock.skipped``) unless ``on_held="raise"``; as a context manager it raises
    :class:`LockNotAcquired`. ``name`` defaults to the decorated function's dotted path.
    """

    def __init__(
        self,
        name: str | Callable[..., Any] | None = None,
        *,
        on_held: Literal["skip", "raise"] = "skip",
        **options: Any,
    ) -> None:
        self._function: Callable[..., Any] | None = None
        if callable(name):  # used bare: @cluster_lock
            self._function, name = name, None
        self.name = name
        self.on_held = on_held
        self.options = options
        self._active: ClusterLock | None = None
        if self._function is not None:
            functools.update_wrapper(self, self._function)

    @overload
    def __call__(self, func: Callable[P, R]) -> Callable[P, R | _Skipped]: ...

    @overload
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._function is not None:
            return self._run(self._function, args, kwargs)
        (func,) = args
        wrapper_self = self

        @functools.wraps(func)
        def wrapper(*a: Any, **kw: Any) -> Any:
            return wrapper_self._run(func, a, kw)

        return wrapper

    def _lock_for(self, func: Callable[..., Any] | None) -> ClusterLock:
        name = self.name
        if name is None:
            if func is None:
                raise ValueError("a cluster_lock used as a context manager needs a name")
            name = f"{func.__module__}.{func.__qualname__}"
        return ClusterLock(name, **self.options)

    def _run(self, func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        lock = self._lock_for(func)
        try:
            acquired = lock.acquire()
        except LockUnavailable:
            if lock.on_unavailable == "skip":
                logger.warning("lock.skipped name=%s reason=backend-unavailable", lock.name)
                return SKIPPED
            raise
        if not acquired:
            if self.on_held == "raise":
                raise LockNotAcquired(f"cluster lock {lock.name!r} is held by another owner")
            logger.info("lock.skipped name=%s reason=held", lock.name)
            return SKIPPED
        try:
            return func(*args, **kwargs)
        finally:
            lock.release()

    def __enter__(self) -> ClusterLock:
        self._active = self._lock_for(None)
        return self._active.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        active, self._active = self._active, None
        if active is not None:
            active.__exit__(exc_type, exc, tb)
