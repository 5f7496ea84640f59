"""Fixtures of the multi-process tests: ``cluster`` (real `run_scheduler` nodes and Celery
workers, stopped after the test), ``lease_kind`` (their lease backend: Redis unless a test
parametrizes it), ``events`` (Celery's task events, what Flower reads) and ``links`` (cut-able
TCP links to a server, tests/support/netfault.py). tests/conftest.py marks every test here
``slow``."""

from tests.support.cluster import cluster, lease_kind  # noqa: F401 (fixtures)
from tests.support.events import events  # noqa: F401 (fixture)
from tests.support.netfault import links  # noqa: F401 (fixture)
