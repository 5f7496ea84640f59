"""Lease backends for tests: each of the three, set up on the suite's services."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_cluster_cron.leases import LeaseBackend

BACKENDS = ["redis", "database", "memory"]
# The backends processes can share (memory is one process's): tests that depend on the lease run
# once per backend with ``@pytest.mark.parametrize("lease_kind", LEASES)``; the others use Redis.
LEASES = ["redis", "database"]


def make_backend(name: str, request: pytest.FixtureRequest) -> LeaseBackend:
    """A fresh backend of kind ``name`` (Redis flushed, database rows cleared by the test's
    transactional database, memory new)."""
    if name == "redis":
        from django_cluster_cron.leases.redis import RedisBackend

        client = request.getfixturevalue("redis_client")
        return RedisBackend(client=client, prefix="test-lease")
    if name == "database":
        from django_cluster_cron.leases.database import DatabaseBackend

        return DatabaseBackend()  # the test must use the transactional database
    from django_cluster_cron.leases.memory import MemoryLeaseBackend

    return MemoryLeaseBackend()


@pytest.fixture(params=BACKENDS)
def lease_backend(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Each lease backend in turn (the test runs once per backend)."""
    from django_cluster_cron.leases.database import close_private_connection

    try:
        yield make_backend(request.param, request)
    finally:
        close_private_connection()
