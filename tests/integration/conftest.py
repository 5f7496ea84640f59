"""Fixtures shared by the integration tests."""

from tests.integration.cluster import cluster  # noqa: F401 (a fixture)
