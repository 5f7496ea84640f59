"""Fixtures of the multi-process tests: ``cluster`` (real `run_scheduler` nodes and Celery
workers, stopped after the test) and ``lease_kind`` (their lease backend: Redis unless a test
parametrizes it). tests/conftest.py marks every test here ``slow``."""

from tests.support.cluster import cluster, lease_kind  # noqa: F401 (fixtures)
