"""The tests' timing budget, named once: how long a loaded machine stalls, how long a wait waits.

The suite runs on loaded 2-core machines (CI, or a laptop running other tests beside it), where
a process now and then stalls between two of its lines while the processes of the test
(schedulers, workers, Redis, the database server) and everyone else's take the cores. A test
whose timing a stall could break takes its room from here, so that nobody works it out again:

* :data:`STALL` — the longest stall a test allows for, once: a second (the in-process tests
  found 0.3 s too little and a second enough); twice that under ``CI=true``.
* :func:`stalls` — room for a number of them, beside a bound on a measured time: each process
  on the measured path may stall.
* :func:`ttl_outlasting` — a TTL (of a lease, a lock, a key) that must still hold at the test's
  later calls: a stall at each of them cannot outlast it.
* :data:`WAIT` and :data:`INTERVAL` — what ``wait_for`` (tests/support/waiting.py) waits by
  default for something that happens in a moment (only a fault reaches the deadline), and how
  often it looks.
* :func:`quiet_for` — a negative check, where time itself must pass: a condition stays false
  for that long.

A TTL that is short because the test measures it (a failover within a lease TTL, an expiry)
stays short: it is what the test is about, and the bound asserted on it gets :func:`stalls`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

# CI runners share their cores with other jobs: every budget here is twice as wide there.
CI = os.environ.get("CI", "").lower() == "true"
WIDEN = 2.0 if CI else 1.0

STALL = 1.0 * WIDEN
WAIT = 30.0 * WIDEN
INTERVAL = 0.05


def stalls(count: int = 1) -> float:
    """Room for ``count`` stalls, beside a bound on a measured time."""
    return count * STALL


def ttl_outlasting(calls: int = 3) -> float:
    """A TTL that ``calls`` calls of the test, each stalled, cannot outlast: for a lease, a lock
    or a key that must still hold at the last of them."""
    return stalls(calls)


def quiet_for(
    seconds: float, condition: Callable[[], object], what: str, *, interval: float = INTERVAL
) -> None:
    """Look at ``condition`` every ``interval`` for ``seconds`` (and once at the end): it must
    stay false. Fails as soon as it is true, naming ``what`` happened and what it returned."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            raise AssertionError(f"{what} within {seconds:g} s: {value!r}")
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)
