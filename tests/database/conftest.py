"""Fixtures of the in-process tests against the database and Redis: ``make_scheduler`` (real
schedulers in this process, on a clock the test moves) and ``lease_kind`` (their lease backend:
Redis unless a test parametrizes it)."""

from tests.support.cluster import lease_kind  # noqa: F401 (fixture)
from tests.support.inprocess import make_scheduler  # noqa: F401 (fixture)
