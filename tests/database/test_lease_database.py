"""The database lease backend against the real database: its row, hand edits, transactions,
lost connections. What every backend promises is in test_lease_contract.py."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.leases import LEADER, LeaseUnavailable, witness
from django_cluster_cron.leases.database import (
    DatabaseBackend,
    DatabaseLease,
    close_private_connection,
    private_connection,
    private_wrapper,
)
from django_cluster_cron.ledger.fence import Fence, FencedOut
from django_cluster_cron.models import SchedulerLease

pytestmark = pytest.mark.django_db(transaction=True)


def row(name=LEADER):
    return SchedulerLease.objects.get(name=name)


def in_another_thread(action):
    """``action()`` on a thread of its own (its own lease connection), returning its result."""
    result: list[object] = []

    def run() -> None:
        try:
            result.append(action())
        finally:
            close_private_connection()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    return result[0]


def test_the_row_holds_token_validity_and_an_epoch_that_moves_only_with_the_owner():
    a = DatabaseLease(LEADER, "node-a", ttl=5)
    b = DatabaseLease(LEADER, "node-b", ttl=0.2)
    assert a.try_acquire()
    first = row()
    assert (first.token, first.holder, first.epoch) == (a.token, "node-a", 1)
    assert first.ttl == timedelta(seconds=5)
    # Database time: valid until now + TTL by the server's clock.
    left = (first.valid_until - database_now()).total_seconds()
    assert 4 < left <= 5

    assert a.try_acquire()  # re-arming its own lease keeps the epoch
    assert a.renew()
    assert row().epoch == 1
    assert a.release()
    released = row()
    assert (released.token, released.valid_until, released.epoch) == ("", None, 1)

    assert b.try_acquire()  # a new owner: a new epoch, and its acquired_at
    assert row().epoch == 2
    assert row().acquired_at > first.acquired_at
    assert b.epoch() == 2
    assert a.epoch() is None


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param({"token": ""}, id="no-owner-but-valid"),
        pytest.param({"valid_until": None}, id="no-validity"),
        pytest.param({"ttl": None}, id="no-ttl"),
        pytest.param({"valid_until": "far-future"}, id="valid-until-2099"),
    ],
)
def test_a_hand_edited_row_is_not_trusted_into_blocking_leadership(edit):
    holder = DatabaseLease(LEADER, "node-a", ttl=30)
    assert holder.try_acquire()
    values = dict(edit)
    if values.get("valid_until") == "far-future":
        values["valid_until"] = database_now() + timedelta(days=365 * 70)
    SchedulerLease.objects.filter(name=LEADER).update(**values)

    other = DatabaseLease(LEADER, "node-b", ttl=30)
    assert other.holder() is None
    assert other.try_acquire()
    repaired = row()
    assert repaired.token == other.token
    assert 29 < (repaired.valid_until - database_now()).total_seconds() <= 30
    assert repaired.epoch == 2
    assert not holder.renew()


def test_an_epoch_edited_backwards_fences_the_leader_and_never_lets_an_old_one_write():
    lease = DatabaseLease(LEADER, "node-a", ttl=30)
    for _ in range(5):  # five leaderships: epochs 1..5, the last one ours
        SchedulerLease.objects.filter(name=LEADER).update(token="gone", valid_until=None)
        assert lease.try_acquire()
    fence = Fence.join(lease.token)
    assert fence is not None
    assert fence.epoch == 5
    SchedulerLease.objects.filter(name=LEADER).update(epoch=3)

    with pytest.raises(FencedOut), fence.transaction(database_now()):
        pass
    # The process that led at epoch 3 long ago wakes up: the epoch matches, its token does not.
    old = Fence(3, "node-old:0123")
    with pytest.raises(FencedOut), old.transaction(database_now()):
        pass


def sqlite_write_lock_held_by_transactions() -> bool:
    mode = connection.settings_dict.get("OPTIONS", {}).get("transaction_mode")
    return connection.vendor == "sqlite" and str(mode).upper() == "IMMEDIATE"


def test_a_lock_taken_inside_a_transaction_is_seen_at_once_and_outlives_a_rollback():
    if sqlite_write_lock_held_by_transactions():
        pytest.skip("SQLite's transaction holds its only write lock: refused, see the next test")
    lease = DatabaseLease("lock:report", "node-a", ttl=30)
    other = DatabaseLease("lock:report", "node-b", ttl=30)
    seen = []

    def take_and_roll_back() -> None:
        with transaction.atomic():
            assert lease.try_acquire()
            seen.append(in_another_thread(other.try_acquire))
            raise RuntimeError("the caller's transaction rolls back")

    with pytest.raises(RuntimeError):
        take_and_roll_back()
    assert seen == [False]
    assert lease.holder() == lease.token
    assert lease.release()


def test_on_sqlite_a_lease_written_inside_an_immediate_transaction_is_refused_at_once():
    """The lease's own connection could only wait out the busy timeout (20 s here) and fail;
    it says why at once. Reads go on."""
    if not sqlite_write_lock_held_by_transactions():
        pytest.skip("only SQLite in transaction_mode IMMEDIATE: a transaction holds its write lock")
    from django_cluster_cron.locks import LockUnavailable, cluster_lock

    lease = DatabaseLease("lock:report", "node-a", ttl=30)
    started = time.monotonic()
    with transaction.atomic():
        with pytest.raises(LeaseUnavailable, match=r"only write lock.*outside transaction\.atomic"):
            lease.try_acquire()
        assert lease.holder() is None  # a read is no write
        refused = pytest.raises(LockUnavailable, match="acquiring lease 'lock:nightly'")
        with refused, cluster_lock("nightly", backend=DatabaseBackend()):
            pass
    assert time.monotonic() - started < 10  # not after the busy timeout (20 s)
    assert lease.try_acquire()  # outside the transaction
    assert lease.release()


def test_a_lost_connection_is_reported_once_and_the_next_call_reconnects():
    lease = DatabaseLease(LEADER, "node-a", ttl=30)
    assert lease.try_acquire()
    wrapper = private_wrapper()
    assert wrapper is not None
    with wrapper.cursor() as cursor:
        cursor.execute(
            "SELECT pg_backend_pid()" if connection.vendor == "postgresql" else "SELECT 1"
        )
        pid = cursor.fetchone()[0]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    elif connection.vendor == "mysql":
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT CONNECTION_ID()")
            own = cursor.fetchone()[0]
        with connection.cursor() as cursor:
            cursor.execute(f"KILL CONNECTION {int(own)}")
    else:
        wrapper.connection.close()  # SQLite has no server: close it under Django's feet

    with pytest.raises(LeaseUnavailable, match="database unreachable"):
        lease.renew()
    assert lease.renew()
    assert lease.holder() == lease.token


def test_leases_live_in_the_lease_table_only():
    backend = DatabaseBackend()
    lease = backend.lease("lock:x", "node-a", 10)
    assert lease.try_acquire()
    assert SchedulerLease.objects.filter(name="lock:x").exists()
    assert backend.held("lock:")[0].name == "x"


# -- early takeover: the leader lease's session witness ------------------------------------------

has_sessions = pytest.mark.skipif(
    "connection.vendor == 'sqlite'",
    reason="SQLite has no sessions across processes: no witness, failover waits for the TTL",
)


def held_elsewhere(lease: DatabaseLease) -> None:
    """``lease`` taken on a thread of its own, whose connection then closes (its session ends)
    while the row still names it for its whole TTL."""
    assert in_another_thread(lease.try_acquire) is True


@has_sessions
def test_a_standby_takes_leadership_at_once_from_a_holder_whose_session_ended(caplog):
    gone = DatabaseLease(LEADER, "node-a", ttl=30)
    held_elsewhere(gone)
    assert row().epoch == 1
    standby = DatabaseLease(LEADER, "node-b", ttl=30)
    with caplog.at_level("INFO", logger="django_cluster_cron.leases"):
        assert standby.try_acquire()
    taken = row()
    assert (taken.token, taken.holder, taken.epoch) == (standby.token, "node-b", 2)
    assert "lease.taken_over name=leader from=node-a node=node-b" in caplog.text
    # The old holder comes back: its lease is gone, and it cannot take it back early either,
    # since the new holder's session is alive.
    assert in_another_thread(gone.renew) is False
    assert in_another_thread(gone.try_acquire) is False
    assert row().token == standby.token


@has_sessions
def test_no_standby_takes_over_while_the_holders_session_lives():
    holder = DatabaseLease(LEADER, "node-a", ttl=30)
    assert holder.try_acquire()  # this thread's connection stays open
    if connection.vendor == "postgresql":
        # The server is asked to notice a dead link within seconds, not its default hours.
        with private_connection("looking") as own, own.cursor() as cursor:
            cursor.execute("SHOW tcp_keepalives_idle")
            assert cursor.fetchone()[0] in ("2", "2s")
    standby = DatabaseLease(LEADER, "node-b", ttl=30)
    assert in_another_thread(standby.try_acquire) is False
    assert row().token == holder.token
    # Renewing after its connection was lost (the next call reconnects) takes the witness again.
    close_private_connection()
    assert holder.renew()
    assert in_another_thread(standby.try_acquire) is False
    assert row().epoch == 1


def witness_free(holder: DatabaseLease) -> bool:
    """Whether no session holds ``holder``'s witness, as another connection sees it."""

    def look() -> bool:
        with private_connection("looking") as own:
            return witness.is_free(own, witness.name_of(LEADER, holder.token))

    return bool(in_another_thread(look))


@has_sessions
def test_release_and_a_lost_renewal_leave_the_witness_free():
    holder = DatabaseLease(LEADER, "node-a", ttl=30)
    assert witness_free(holder)
    assert holder.try_acquire()
    assert not witness_free(holder)
    assert holder.release()
    assert witness_free(holder)
    assert holder.try_acquire()
    assert not witness_free(holder)
    # Its session lives on, but the row went to someone else: the renewal finds out and lets
    # the witness go, so that the next holder's can be told apart.
    SchedulerLease.objects.filter(name=LEADER).update(token="node-z:0123")
    assert not holder.renew()
    assert witness_free(holder)


@has_sessions
def test_locks_are_not_taken_over_early():
    """A cluster lock is held by a task's body, renewed from another thread: only the TTL
    frees it."""
    gone = DatabaseLease("lock:report", "node-a", ttl=30)
    held_elsewhere(gone)
    other = DatabaseLease("lock:report", "node-b", ttl=30)
    assert other.try_acquire() is False
    assert row("lock:report").token == gone.token


def test_on_sqlite_there_is_no_witness_and_a_standby_waits_for_the_ttl():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: the other databases have sessions (tests above)")
    gone = DatabaseLease(LEADER, "node-a", ttl=30)
    held_elsewhere(gone)
    assert DatabaseLease(LEADER, "node-b", ttl=30).try_acquire() is False


@has_sessions
def test_a_server_that_refuses_the_witness_leaves_the_lease_as_it_was(monkeypatch, caplog):
    from django.db import DatabaseError

    def refused(*args):
        raise DatabaseError("function pg_try_advisory_lock(integer, integer) does not exist")

    for name in ("_hold", "_is_free", "_let_go"):
        monkeypatch.setattr(witness, name, refused)
    monkeypatch.setattr(witness, "_reported", [])
    holder = DatabaseLease(LEADER, "node-a", ttl=30)
    with caplog.at_level("WARNING", logger="django_cluster_cron.leases"):
        assert holder.try_acquire()
        assert holder.renew()
    assert caplog.text.count("lease.witness_unavailable") == 1
    # No early takeover without a witness: the standby waits for the TTL.
    assert in_another_thread(DatabaseLease(LEADER, "node-b", ttl=30).try_acquire) is False
    assert holder.release()
