"""The cluster lock's tests on each lease backend (Redis, the database): a fresh key prefix per
test (``prefix``, a fixture: import it into the test module), and what a child process needs."""

from __future__ import annotations

import uuid

import pytest

from django_cluster_cron.leases import get_backend


@pytest.fixture(params=["redis", "database"])
def prefix(request, settings, redis_client):
    """A fresh key prefix, and the lease backend of this run of the test."""
    value = f"t{uuid.uuid4().hex[:8]}"
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "KEY_PREFIX": value,
        "LEASE_BACKEND": request.param,
    }
    return value


def lock_holder(name: str) -> str | None:
    return get_backend().lease(f"lock:{name}", "test", 1).holder()


def subprocess_settings(prefix: str) -> str:
    from django_cluster_cron.conf import app_settings

    backend = app_settings.LEASE_BACKEND
    return f'{{"KEY_PREFIX": "{prefix}", "LEASE_BACKEND": "{backend}"}}'
