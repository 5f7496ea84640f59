"""What every lease backend promises, run against each of them (Redis, the database, memory).

Ownership by token, expiry, renewal, release, and the cluster page's view of held leases (node
reports and counters: test_coordination.py). Backend-specific behaviour (junk in Redis,
hand-edited rows, outages) lives in test_lease_redis.py and test_lease_database.py.
"""

from __future__ import annotations

import time

import pytest

from django_cluster_cron.leases import LeaseBackend
from tests.support.leases import lease_backend
from tests.support.waiting import wait_for

__all__ = ["lease_backend"]

# The database backend needs the test database; its rows must be committed (other connections).
pytestmark = pytest.mark.django_db(transaction=True)

NAME = "leader"


def test_only_one_of_two_nodes_acquires_and_holder_shows_the_winners_token(
    lease_backend: LeaseBackend,
) -> None:
    first = lease_backend.lease(NAME, "node-a", ttl=1)
    second = lease_backend.lease(NAME, "node-b", ttl=1)

    assert first.holder() is None
    assert first.remaining() is None
    assert first.try_acquire() is True
    assert second.try_acquire() is False

    assert first.holder() == second.holder() == first.token
    assert first.token.startswith("node-a:")
    assert 0 < (first.remaining() or 0) <= 1


def test_two_processes_with_the_same_node_id_get_different_tokens(
    lease_backend: LeaseBackend,
) -> None:
    first = lease_backend.lease(NAME, "host-1", ttl=1)
    second = lease_backend.lease(NAME, "host-1", ttl=1)

    assert first.token != second.token
    assert first.try_acquire() is True
    assert second.try_acquire() is False
    assert second.renew() is False
    assert second.release() is False
    assert first.holder() == first.token


def test_acquiring_again_while_holding_returns_true_and_rearms_the_ttl(
    lease_backend: LeaseBackend,
) -> None:
    ttl = 0.6
    lease = lease_backend.lease(NAME, "node-a", ttl=ttl)
    assert lease.try_acquire() is True
    time.sleep(0.4)  # real time must pass: most of the TTL

    # Re-armed: what is left is the whole TTL less the time since the call (measured around the
    # calls, so a stall between them on a loaded machine is accounted for, not a failure); not
    # re-armed, it would be at most what the first acquisition had left, 0.2 s less that time.
    before = time.monotonic()
    assert lease.try_acquire() is True
    remaining = lease.remaining() or 0
    since = time.monotonic() - before
    assert ttl - since - 0.05 <= remaining <= ttl
    assert lease.holder() == lease.token


def test_a_stale_holder_can_neither_renew_nor_release_after_another_node_took_over(
    lease_backend: LeaseBackend,
) -> None:
    stale = lease_backend.lease(NAME, "node-a", ttl=0.3)
    successor = lease_backend.lease(NAME, "node-b", ttl=5)
    assert stale.try_acquire() is True

    # node-a "pauses" past its TTL; node-b takes over.
    wait_for(successor.try_acquire, 3, "the stale holder's lease to expire")

    assert stale.renew() is False
    assert stale.release() is False
    assert stale.try_acquire() is False
    assert successor.holder() == successor.token
    assert (successor.remaining() or 0) > 4  # the stale renew did not touch the TTL either


def test_a_standby_acquires_once_the_ttl_passes_without_renewal(
    lease_backend: LeaseBackend,
) -> None:
    ttl = 1.0  # long enough that a stall between the first two calls cannot outlast it
    leader = lease_backend.lease(NAME, "node-a", ttl=ttl)
    standby = lease_backend.lease(NAME, "node-b", ttl=ttl)
    started = time.monotonic()
    assert leader.try_acquire() is True
    assert standby.try_acquire() is False

    wait_for(standby.try_acquire, 5, "the unrenewed lease to expire")

    assert time.monotonic() - started >= ttl - 0.05
    assert leader.holder() == standby.token
    assert leader.renew() is False


def test_renewing_keeps_the_lease_for_several_ttls(lease_backend: LeaseBackend) -> None:
    ttl = 1.5  # a loaded machine may stall a renewal this long minus a third and not lose it
    leader = lease_backend.lease(NAME, "node-a", ttl=ttl)
    standby = lease_backend.lease(NAME, "node-b", ttl=ttl)
    assert leader.try_acquire() is True

    deadline = time.monotonic() + 3 * ttl
    while time.monotonic() < deadline:
        time.sleep(ttl / 3)  # real time must pass: renew at TTL/3, as the scheduler does
        assert leader.renew() is True
        assert standby.try_acquire() is False

    assert leader.holder() == leader.token
    # A renewal sets the expiry a whole TTL ahead: what is left is the TTL less the time since
    # (measured around the calls, so a stall between them is accounted for, not a failure).
    before = time.monotonic()
    assert leader.renew() is True
    remaining = leader.remaining() or 0
    since = time.monotonic() - before
    assert ttl - since - 0.05 <= remaining <= ttl


def test_renew_with_a_ttl_sets_that_ttl(lease_backend: LeaseBackend) -> None:
    # A cluster lock's at_least keeps a released lock held for the rest of its minimum time,
    # shorter or longer than its TTL.
    lease = lease_backend.lease(NAME, "node-a", ttl=1)
    assert lease.try_acquire() is True
    assert lease.renew(ttl=3) is True
    assert 2 < (lease.remaining() or 0) <= 3
    other = lease_backend.lease(NAME, "node-b", ttl=1)
    assert other.try_acquire() is False
    assert lease.renew(ttl=0.2) is True
    wait_for(other.try_acquire, 3, "the shortened lease to expire")


def test_release_frees_the_lease_at_once_and_another_node_acquires_immediately(
    lease_backend: LeaseBackend,
) -> None:
    leader = lease_backend.lease(NAME, "node-a", ttl=30)
    successor = lease_backend.lease(NAME, "node-b", ttl=30)
    assert leader.try_acquire() is True

    assert leader.release() is True

    assert leader.holder() is None
    assert successor.try_acquire() is True
    assert leader.release() is False  # a second release finds someone else's lease
    assert successor.holder() == successor.token


def test_a_lease_is_freed_for_its_holders_token_only(lease_backend: LeaseBackend) -> None:
    """What a standby does for a leader that gave its term up where the standby can read it."""
    leader = lease_backend.lease(NAME, "node-a", ttl=30)
    successor = lease_backend.lease(NAME, "node-b", ttl=30)
    assert leader.try_acquire() is True

    assert lease_backend.release_held_by(NAME, successor.token) is False
    assert leader.holder() == leader.token
    assert lease_backend.release_held_by(NAME, leader.token) is True
    assert successor.try_acquire() is True
    assert lease_backend.release_held_by(NAME, leader.token) is False  # not the leader's any more
    assert successor.holder() == successor.token


def test_leases_of_different_names_are_independent(lease_backend: LeaseBackend) -> None:
    a = lease_backend.lease("lock:a", "node-a", ttl=5)
    b = lease_backend.lease("lock:b", "node-b", ttl=5)
    assert a.try_acquire() is True
    assert b.try_acquire() is True
    assert a.holder() == a.token
    assert b.holder() == b.token


def test_the_cluster_page_lists_held_locks_and_force_release_frees_one(
    lease_backend: LeaseBackend,
) -> None:
    held = lease_backend.lease("lock:reports", "node-a", ttl=30)
    expired = lease_backend.lease("lock:expired", "node-a", ttl=0.2)
    released = lease_backend.lease("lock:released", "node-a", ttl=30)
    assert held.try_acquire()
    assert expired.try_acquire()
    assert released.try_acquire()
    assert released.release()
    time.sleep(0.3)  # real time must pass: lock:expired's 0.2 s TTL runs out

    listed = lease_backend.held("lock:")
    assert [(h.name, h.owner) for h in listed] == [("reports", held.token)]
    assert 25 < (listed[0].ttl or 0) <= 30

    assert lease_backend.force_release("lock:reports") is True
    assert lease_backend.force_release("lock:reports") is False
    assert lease_backend.held("lock:") == []
    assert held.renew() is False  # the owner finds out at its next heartbeat


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf")])
def test_a_ttl_that_is_not_a_positive_number_of_seconds_is_rejected(
    lease_backend: LeaseBackend, ttl: float
) -> None:
    with pytest.raises(ValueError, match="ttl"):
        lease_backend.lease(NAME, "node-a", ttl=ttl)
