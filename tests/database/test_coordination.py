"""What the nodes share besides leases, on each lease backend's store: node reports, counters."""

from __future__ import annotations

import time
from typing import Any

import pytest

from django_cluster_cron.coordination import Coordination, coordination_for
from tests.support.leases import BACKENDS, make_backend
from tests.support.waiting import wait_for

# The database's reports and counters are rows other connections must see: committed.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=BACKENDS)
def coordination(request: pytest.FixtureRequest) -> Any:
    """The coordination beside each lease backend in turn."""
    return coordination_for(make_backend(request.param, request))


def test_node_reports_are_listed_until_they_expire(coordination: Coordination) -> None:
    coordination.reports.report("a", {"node": "a", "role": "leader"}, ttl=30)
    reported = time.monotonic()
    coordination.reports.report("b", {"node": "b", "role": "standby"}, ttl=1.5)
    coordination.reports.report("a", {"node": "a", "role": "standby"}, ttl=30)  # replaces
    assert sorted(r["node"] for r in coordination.reports.reports()) == ["a", "b"]
    wait_for(
        lambda: coordination.reports.reports() == [{"node": "a", "role": "standby"}],
        10,
        "b's report to expire",
    )
    assert time.monotonic() - reported >= 1.4  # not before its 1.5 s TTL (a clock's grain less)


def test_counters_count_from_zero(coordination: Coordination) -> None:
    assert coordination.counters.value("drops") == 0
    for _ in range(3):
        coordination.counters.incr("drops")
    assert coordination.counters.value("drops") == 3
