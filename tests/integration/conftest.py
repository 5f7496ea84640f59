"""Fixtures shared by the integration tests."""

from tests.integration.cluster import cluster, lease_kind  # noqa: F401 (fixtures)
