"""Leases: who holds a name for a while (the scheduler's leadership, a cluster lock).

The interface is in :mod:`.base`; the backends are :mod:`.redis`, :mod:`.database` and
:mod:`.memory` (tests); the cluster lock built on them is :mod:`.lock` (public import path:
:mod:`django_cluster_cron.locks`). :func:`get_backend` returns the configured backend.

``CLUSTER_CRON["LEASE_BACKEND"]``: ``"redis"``, ``"database"`` or ``"memory"``; unset, it is
``"redis"`` when a django-redis cache is configured under ``REDIS_ALIAS`` (or ``REDIS_ALIAS`` is
set explicitly) and ``"database"`` otherwise.
"""

from __future__ import annotations

import threading

from .base import LEADER, LOCK_PREFIX, HeldLease, Lease, LeaseBackend, LeaseUnavailable

__all__ = [
    "LEADER",
    "LOCK_PREFIX",
    "HeldLease",
    "Lease",
    "LeaseBackend",
    "LeaseUnavailable",
    "backend_name",
    "get_backend",
]

BACKENDS = ("redis", "database", "memory")
_DJANGO_REDIS_BACKEND = "django_redis.cache.RedisCache"

_memory_lock = threading.Lock()
_memory: LeaseBackend | None = None


def backend_name() -> str:
    """The lease backend the settings choose (see the module doc)."""
    from ..conf import app_settings

    chosen = app_settings.LEASE_BACKEND
    if chosen is not None:
        return chosen
    if "REDIS_ALIAS" in app_settings.raw():
        return "redis"
    return "redis" if is_django_redis_alias(app_settings.REDIS_ALIAS) else "database"


def is_django_redis_alias(alias: str) -> bool:
    """True if ``CACHES[alias]`` is a django-redis cache (the class, or a subclass of it)."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    config = getattr(settings, "CACHES", {}).get(alias)
    if not config:
        return False
    backend = config.get("BACKEND", "")
    try:
        backend_class = import_string(backend)
        base = import_string(_DJANGO_REDIS_BACKEND)
    except ImportError:
        return False
    return isinstance(backend_class, type) and issubclass(backend_class, base)


def get_backend() -> LeaseBackend:
    """The configured backend. The memory backend is one per process (its leases live there)."""
    global _memory
    name = backend_name()
    if name == "redis":
        from .redis import RedisBackend

        return RedisBackend()
    if name == "database":
        from .database import DatabaseBackend

        return DatabaseBackend()
    with _memory_lock:
        if _memory is None:
            from .memory import MemoryLeaseBackend

            _memory = MemoryLeaseBackend()
        return _memory
