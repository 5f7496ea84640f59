"""Real `run_scheduler` processes with the Redis lease, whose leader's link to Redis is cut: the
lease's own store (and the broker's) is out of its reach, the database is not. The leader gives
its term up through the database and a standby frees the Redis key at once rather than when it
expires. Each slot is recorded exactly once.

How fast is measured by bench/partitions.py; the deadlines here only say "while the fault lasts".
"""

from __future__ import annotations

import pytest

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.models import JobRun
from tests.support.cluster import TTL, assert_every_slot_once, every_second_job, sent_by
from tests.support.netfault import url_through
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def lease_kind():
    return "redis"


@pytest.fixture(autouse=True)
def _catch_up_every_slot(cluster):
    cluster.settings["CATCHUP_CAP"] = 1000


def test_a_leader_cut_off_from_redis_hands_its_term_over_through_the_database(cluster, links):
    job = every_second_job()
    url = cluster.env["REDIS_URL"]
    link = links(url)
    cluster.start("a", REDIS_URL=url_through(url, link))
    wait_for(lambda: sent_by("a", job), 60, "node a leading", detail=lambda: cluster.log("a"))
    cluster.start("b")
    cluster.wait_standby("b")

    link.refuse()
    cut = database_now()
    wait_for(
        lambda: sent_by("b", job, after=cut),
        30 * TTL,
        "node b dispatching while node a cannot reach Redis",
        detail=lambda: cluster.log("a")[-3000:],
    )
    assert "lease.handed_over node=a" in cluster.log("a"), cluster.log("a")[-3000:]
    assert "lease.taken_over name=leader from=a node=b" in cluster.log("b"), cluster.log("b")

    link.heal()
    healed = database_now()
    wait_for(
        lambda: JobRun.objects.filter(job=job, scheduled_for__gt=healed).count() >= 3,
        60,
        "3 slots after the link healed",
    )
    cluster.stop_all()
    assert_every_slot_once(job)
