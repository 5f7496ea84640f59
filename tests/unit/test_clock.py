"""The offset clock: a host clock corrected to the database's, and when its skew is reported."""

from datetime import datetime, timedelta, timezone

from django_cluster_cron.core.clock import OffsetClock, SkewChange, format_offset

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)


class HostClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def clock(host_ahead: timedelta) -> tuple[OffsetClock, HostClock]:
    host = HostClock(T0 + host_ahead)
    return OffsetClock(host=host, warn_after=S), host


def observe(c: OffsetClock, host: HostClock, reference: datetime, rtt: timedelta = 0 * S):
    """A round trip of ``rtt`` that returned ``reference`` at its midpoint."""
    sent = host.now
    host.now = sent + rtt
    return c.observe(reference + rtt / 2, sent, host.now)


def is_skewed(c: OffsetClock) -> bool:
    return c.skewed


def test_before_any_reading_it_is_the_host_clock():
    c, host = clock(30 * S)
    assert not c.measured
    assert c() == host.now


def test_a_host_ahead_answers_the_reference_time_and_reports_once():
    c, host = clock(30 * S)
    assert observe(c, host, T0, rtt=0.2 * S) is SkewChange.SKEWED
    assert c.offset == 30 * S
    assert c() == T0 + 0.2 * S
    assert c.skewed
    # The same offset again, or one that moved by less than the bound: no new report.
    assert observe(c, host, c() - 0.5 * S) is None
    assert observe(c, host, c()) is None


def test_a_host_behind_has_a_negative_offset():
    c, host = clock(-30 * S)
    assert observe(c, host, T0) is SkewChange.SKEWED
    assert c.offset == -30 * S
    assert format_offset(c.offset) == "-30.000s"
    assert c() == T0


def test_an_offset_that_moves_by_more_than_the_bound_is_reported_again():
    c, host = clock(30 * S)
    observe(c, host, T0)
    assert observe(c, host, host.now - 40 * S) is SkewChange.SKEWED
    assert format_offset(c.offset) == "+40.000s"


def test_back_within_half_the_bound_is_reported_synced_and_only_then():
    c, host = clock(30 * S)
    observe(c, host, T0)
    # Within the bound but not within half of it: still counted as skewed (no flapping).
    assert observe(c, host, host.now - 0.8 * S) is None
    assert is_skewed(c)
    assert observe(c, host, host.now - 0.2 * S) is SkewChange.SYNCED
    assert not is_skewed(c)
    assert observe(c, host, host.now) is None


def test_a_small_offset_is_never_reported():
    c, host = clock(0.3 * S)
    assert observe(c, host, T0) is None
    assert c.measured
    assert not c.skewed


def test_a_stalled_round_trip_does_not_move_the_offset():
    c, host = clock(30 * S)
    observe(c, host, T0, rtt=0.002 * S)
    assert c.offset == 30 * S
    # A 2 s round trip whose answer was read 0.1 s in (the rest was the reply's stall): its
    # midpoint says 30.9 s, within its own ±1 s of the 30 s measured before. The narrow one stays.
    sent = host.now
    host.now = sent + 2 * S
    assert c.observe(sent + 0.1 * S - 30 * S, sent, host.now) is None
    assert c.offset == 30 * S


def test_a_step_of_the_clock_is_taken_at_once_even_from_a_wide_round_trip():
    c, host = clock(30 * S)
    observe(c, host, T0, rtt=0.002 * S)
    host.now += 40 * S  # the host's clock stepped forward
    observe(c, host, host.now - 70 * S, rtt=0.5 * S)
    assert c.offset == 70 * S


def test_a_narrow_estimate_is_kept_for_a_while_then_the_narrowest_recent_one_wins():
    from django_cluster_cron.core.clock import ESTIMATES_KEPT

    c, host = clock(0 * S)
    observe(c, host, host.now, rtt=0.002 * S)
    # Wider round trips that agree with it but whose midpoints say 0.1 s.
    for _ in range(ESTIMATES_KEPT - 1):
        observe(c, host, host.now - 0.1 * S, rtt=0.4 * S)
        assert c.offset == 0 * S
    observe(c, host, host.now - 0.1 * S, rtt=0.4 * S)
    assert c.offset == 0.1 * S
