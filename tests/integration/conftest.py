"""Fixtures shared by the integration tests."""

from tests.support.cluster import cluster, lease_kind  # noqa: F401 (fixtures)
from tests.support.inprocess import make_scheduler  # noqa: F401 (fixture)
