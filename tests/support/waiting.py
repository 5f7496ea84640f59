"""Waiting until something has happened, with a deadline: the one helper every test uses.

A test that means "until X happened" waits for X, never for a fixed time: on a loaded 2-core CI
machine any fixed sleep is too short some day. The timeout is only reached when something is
wrong, so make it generous (the default, ``timing.WAIT``, is), and say what is awaited: the
failure names it.

The reverse holds too: a TTL, a lease or a timeout that must still hold at the test's next call
outlasts a stall at each call (``timing.ttl_outlasting``), a bound on a measured time leaves room
for stalls (``timing.stalls``), and "nothing happens for N s" is ``timing.quiet_for``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar, overload

from tests.support.timing import INTERVAL, WAIT

T = TypeVar("T")


@overload
def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = ...,
    detail: Callable[[], object] | None = ...,
) -> T: ...
@overload
def wait_for(
    predicate: Callable[[], T],
    *,
    what: str,
    timeout: float = ...,
    interval: float = ...,
    detail: Callable[[], object] | None = ...,
) -> T: ...
def wait_for(
    predicate: Callable[[], T],
    timeout: float = WAIT,
    what: str = "",
    *,
    interval: float = INTERVAL,
    detail: Callable[[], object] | None = None,
) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy, and return
    that. Once ``timeout`` seconds have passed (and a last call found nothing), fail with an
    AssertionError naming ``what``, followed by ``detail()`` if given (a log, say).

    ``wait_for(predicate, 60, "what")``, or ``wait_for(predicate, what="what")`` for the default
    deadline; ``what`` is never left out."""
    if not what:
        raise TypeError("wait_for: say what is awaited (what=...)")
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
