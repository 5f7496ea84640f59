"""Real `run_scheduler` processes whose link to the database is cut (a TCP proxy per node,
tests/support/netfault.py): the cluster keeps dispatching through another node while one is cut
off, leaves the lease alone while every node is, and records each slot exactly once — with each
lease backend.

How fast a standby takes over under each fault is measured by bench/partitions.py; here the
deadlines are generous and only say "while the fault lasts".
"""

from __future__ import annotations

import re

import pytest
from django.db import connection

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.models import JobRun
from tests.conftest import database_url
from tests.support.cluster import TTL, assert_every_slot_once, every_second_job, sent_by
from tests.support.leases import LEASES
from tests.support.netfault import FaultyLink, url_through
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.parametrize("lease_kind", LEASES)]


@pytest.fixture
def db_link(links):
    """``db_link()``: a new cut-able link to the test database."""
    if connection.vendor == "sqlite":
        pytest.skip("a SQLite database is a file: there is no link to cut")
    url = database_url(connection.settings_dict)
    return lambda: links(url)


def through(link: FaultyLink) -> str:
    return url_through(database_url(connection.settings_dict), link)


@pytest.fixture(autouse=True)
def _catch_up_every_slot(cluster):
    # Every slot of the outage is run late: none is left missed by the catch-up cap.
    cluster.settings["CATCHUP_CAP"] = 1000


def test_a_leader_cut_off_from_the_database_gives_way_to_a_standby(cluster, db_link):
    job = every_second_job()
    link = db_link()
    cluster.start("a", DATABASE_URL=through(link))
    wait_for(lambda: sent_by("a", job), 60, "node a leading", detail=lambda: cluster.log("a"))
    cluster.start("b")
    cluster.wait_standby("b")

    link.refuse()
    cut = database_now()
    # Long before the fault ends (never, here, until b has led): b leads and dispatches.
    wait_for(
        lambda: sent_by("b", job, after=cut),
        30 * TTL,
        "node b dispatching while node a cannot reach the database",
        detail=lambda: cluster.log("a")[-3000:],
    )
    log = cluster.log("a")
    assert "db.down" in log
    if cluster.lease_kind == "redis":
        # a gave the lease up itself (the database lease it could not even reach to release).
        assert re.search(r"lease\.released node=a .*reason=database unreachable", log), log
    else:
        # a's lease connection was reset: b saw its session end and took the row over early.
        assert "lease.taken_over name=leader from=a node=b" in cluster.log("b"), cluster.log("b")
    # While still cut off, a stays a standby: it does not take the lease it could not use.
    healed_at = database_now()
    wait_for(lambda: sent_by("b", job, after=healed_at), 60, "node b still dispatching")
    assert "lease.acquired node=a" not in log.split("db.down", 1)[1]

    link.heal()
    later = database_now()
    wait_for(
        lambda: JobRun.objects.filter(job=job, scheduled_for__gt=later).count() >= 3, 60, "3 slots"
    )
    cluster.stop_all()
    assert_every_slot_once(job)


def test_with_the_database_out_of_every_nodes_reach_no_node_takes_the_lease(cluster, db_link):
    job = every_second_job()
    first, second = db_link(), db_link()
    cluster.start("a", DATABASE_URL=through(first))
    wait_for(lambda: sent_by("a", job), 60, "node a leading", detail=lambda: cluster.log("a"))
    cluster.start("b", DATABASE_URL=through(second))
    cluster.wait_standby("b")

    first.refuse()
    second.refuse()
    wait_for(lambda: "db.down" in cluster.log("a"), 60, "node a to see the database down")
    # Watch a few lease lifetimes: nobody may take the lease it cannot use (no flapping).
    quiet = cluster.log("a"), cluster.log("b")
    wait_for(
        lambda: "db.down" in cluster.log("b") or cluster.procs["b"].poll() is not None,
        60,
        "node b to see the database down",
    )
    watched = database_now()
    wait_for(lambda: (database_now() - watched).total_seconds() > 4 * TTL, 60, "four TTLs")
    for node, before in zip(("a", "b"), quiet, strict=True):
        during = cluster.log(node)[len(before) :]
        assert "lease.acquired" not in during, during

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
        "dispatch after the database came back",
        detail=lambda: cluster.log("a")[-2000:] + cluster.log("b")[-2000:],
    )
    cluster.stop_all()
    assert_every_slot_once(job)


def test_a_leader_whose_database_link_goes_silent_is_replaced(cluster, db_link):
    job = every_second_job()
    link = db_link()
    cluster.start("a", DATABASE_URL=through(link))
    wait_for(lambda: sent_by("a", job), 60, "node a leading", detail=lambda: cluster.log("a"))
    cluster.start("b")
    cluster.wait_standby("b")

    link.silence()
    cut = database_now()
    wait_for(
        lambda: sent_by("b", job, after=cut),
        30 * TTL,
        "node b dispatching while node a hears nothing from the database",
        detail=lambda: cluster.log("a")[-3000:],
    )
    link.heal()
    later = database_now()
    wait_for(
        lambda: JobRun.objects.filter(job=job, scheduled_for__gt=later).count() >= 3, 60, "3 slots"
    )
    cluster.stop_all()
    assert_every_slot_once(job)
