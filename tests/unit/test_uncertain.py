"""Noticing a database that went back (django_cluster_cron.core.uncertain): pure, on made-up
rows. The scheduler and the ledger with it: tests/database/test_lost_writes.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django_cluster_cron.core.uncertain import Horizon

T = datetime(2030, 1, 1, 12, tzinfo=timezone.utc)
S = timedelta(seconds=1)


def seen(*rows: tuple[int, int, datetime | None, str]) -> Horizon:
    horizon = Horizon()
    for row in rows:
        horizon.observe(*row)
    return horizon


def test_a_row_that_only_moved_forward_is_not_judged():
    horizon = seen((3, 10, T, "a"), (3, 12, T + 2 * S, "a"))
    assert horizon.judge(3, 12, T + 2 * S, "a") is None
    assert horizon.judge(4, 15, T + 5 * S, "a") is None


def test_fewer_writes_than_seen_on_another_server_is_a_lossy_failover():
    horizon = seen((3, 10, T, "a/1"), (3, 20, T + 8 * S, "a/1"))
    went = horizon.judge(3, 12, T + 2 * S, "a/2")
    assert went is not None
    assert went.writes_lost
    assert went.server_changed
    assert "another server answers" in went.cause()


def test_fewer_writes_on_the_same_server_is_a_restore_or_an_edit():
    went = seen((3, 20, T, "a")).judge(3, 12, T - 5 * S, "a")
    assert went is not None
    assert went.writes_lost
    assert not went.server_changed
    assert "restore" in went.cause()


def test_an_epoch_edited_back_alone_loses_no_writes():
    went = seen((7, 20, T, "a")).judge(5, 20, T, "a")
    assert went is not None
    assert not went.writes_lost
    assert "epoch is below one this node saw" in went.cause()


def test_a_new_term_takes_an_epoch_above_every_one_seen():
    horizon = seen((9, 1, None, ""), (4, 30, T, "a"))
    assert horizon.epoch_floor == 10
    # A lower epoch seen later does not lower it; fewer writes do not replace more.
    assert (horizon.writes, horizon.last_write_at) == (30, T)


def test_a_clock_that_steps_back_is_no_loss():
    """The count decides, not the time: a later write stamped earlier (a clock stepped back)
    is an ordinary write."""
    horizon = seen((3, 10, T, "a"), (3, 11, T - 60 * S, "a"))
    assert horizon.judge(3, 11, T - 60 * S, "a") is None


def test_the_window_runs_from_the_last_kept_write_to_the_last_seen_one_with_margins():
    went = seen((3, 20, T + 8 * S, "a/1")).judge(3, 12, T, "a/2")
    assert went is not None
    ttl, ahead = 10 * S, 30 * S
    start, end = went.window(ttl=ttl, lookahead=ahead, now=T + 600 * S)
    assert (start, end) == (T - 40 * S, T + 48 * S)
    # Never past now: a slot not yet due has no fate to doubt.
    assert went.window(ttl=ttl, lookahead=ahead, now=T + 20 * S) == (T - 40 * S, T + 20 * S)


def test_nothing_seen_nothing_judged():
    assert Horizon().judge(1, 0, None, "") is None
