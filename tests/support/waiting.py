"""Waiting until something has happened, with a deadline: the one helper every test uses.

A test that means "until X happened" waits for X, never for a fixed time: on a loaded 2-core CI
machine any fixed sleep is too short some day. The timeout is only reached when something is
wrong, so make it generous, and say what is awaited: the failure names it.

The reverse holds too: a TTL, a lease or a timeout that must still hold at the test's next call
is seconds long, not a fraction of one, and a bound on a measured time leaves seconds for a
stall; a process can stall between two lines for longer than 0.3 s on such a machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.05,
    detail: Callable[[], object] | None = None,
) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy, and return
    that. Once ``timeout`` seconds have passed (and a last call found nothing), fail with an
    AssertionError naming ``what``, followed by ``detail()`` if given (a log, say)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            message = f"timed out after {timeout}s waiting for {what}"
            if detail is not None:
                message += f"\n{detail()}"
            raise AssertionError(message)
        time.sleep(interval)
