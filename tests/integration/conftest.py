"""Fixtures shared by the integration tests."""

from tests.integration.cluster import cluster, lease_kind  # noqa: F401 (fixtures)
from tests.integration.inprocess import make_scheduler  # noqa: F401 (fixture)
