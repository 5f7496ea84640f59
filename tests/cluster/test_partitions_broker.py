"""Real `run_scheduler` processes whose link to Redis is cut. With the database lease Redis is only
the broker: a leader that cannot publish gives way to a node that can, and when no node can, the
lease is not passed around: each node leaves it to the others for longer and longer. With the
Redis lease it is the lease's own store too: the leader gives its term up through the database and
a standby frees the key at once. Each slot is recorded exactly once.
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
    return "database"


@pytest.fixture(autouse=True)
def _catch_up_every_slot(cluster):
    cluster.settings["CATCHUP_CAP"] = 1000


def cut_the_leaders_redis_link(cluster, links, job):
    """Node a leads through a link to Redis, node b stands by; the link is refused until node b
    dispatches. Returns the link."""
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
    return link


def heal_and_check(cluster, link, job):
    link.heal()
    healed = database_now()
    wait_for(
        lambda: JobRun.objects.filter(job=job, scheduled_for__gt=healed).count() >= 3,
        60,
        "3 slots after the link healed",
    )
    cluster.stop_all()
    assert_every_slot_once(job)


def test_a_leader_cut_off_from_the_broker_gives_way_to_a_standby(cluster, links):
    job = every_second_job()
    link = cut_the_leaders_redis_link(cluster, links, job)
    log = cluster.log("a")
    assert "broker.down" in log
    assert "reason=broker unreachable" in log, log[-3000:]
    # Still cut off, a stays a standby: it does not take a lease it could not use.
    later = database_now()
    wait_for(lambda: sent_by("b", job, after=later), 60, "node b still dispatching")
    assert "lease.acquired node=a" not in cluster.log("a").split("reason=broker unreachable")[1]
    heal_and_check(cluster, link, job)


@pytest.mark.parametrize("lease_kind", ["redis"])
def test_a_redis_lease_leader_cut_off_from_redis_hands_its_term_over_through_the_database(
    cluster, links
):
    job = every_second_job()
    link = cut_the_leaders_redis_link(cluster, links, job)
    assert "lease.handed_over node=a" in cluster.log("a"), cluster.log("a")[-3000:]
    assert "lease.taken_over name=leader from=a node=b" in cluster.log("b"), cluster.log("b")
    heal_and_check(cluster, link, job)


def test_with_the_broker_out_of_every_nodes_reach_the_lease_settles(cluster, links):
    job = every_second_job()
    url = cluster.env["REDIS_URL"]
    first, second = links(url), links(url)
    cluster.start("a", REDIS_URL=url_through(url, first))
    wait_for(lambda: sent_by("a", job), 60, "node a leading", detail=lambda: cluster.log("a"))
    cluster.start("b", REDIS_URL=url_through(url, second))
    cluster.wait_standby("b")

    first.refuse()
    second.refuse()

    # Each node may lead once more and find it cannot publish; then neither takes the lease.
    def both_gave_up() -> bool:
        return all("reason=broker unreachable" in cluster.log(node) for node in ("a", "b"))

    wait_for(
        both_gave_up,
        60,
        "nodes a and b giving the lease up",
        detail=lambda: cluster.log("a")[-2000:] + cluster.log("b")[-2000:],
    )
    # Each now leaves the lease to the other for 3 TTLs, then leads one pass without the broker
    # (recording what is due) and waits twice as long: over 8 TTLs a node leads at most twice,
    # where passing the lease around would have it lead every few polls.
    settled = cluster.log("a"), cluster.log("b")
    watched = database_now()
    wait_for(lambda: (database_now() - watched).total_seconds() > 8 * TTL, 60, "eight TTLs")
    for node, before in zip(("a", "b"), settled, strict=True):
        during = cluster.log(node)[len(before) :]
        assert during.count("lease.acquired") <= 2, during
    assert "lease.trying_without_broker" in cluster.log("a") + cluster.log("b")

    first.heal()
    second.heal()
    healed = database_now()
    wait_for(
        lambda: (
            JobRun.objects.filter(
                job=job, scheduled_for__gt=healed, queued_at__isnull=False
            ).count()
            >= 3
        ),
        60,
        "dispatch after the broker came back",
        detail=lambda: cluster.log("a")[-2000:] + cluster.log("b")[-2000:],
    )
    cluster.stop_all()
    assert_every_slot_once(job)
