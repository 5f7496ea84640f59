"""Loaded (as ``sitecustomize``) only by test processes started under Debian's ``faketime``.

The harness runs them with ``FAKETIME_DONT_FAKE_MONOTONIC=1``: only the wall clock is faked,
as on a host whose clock is off, while timeouts keep running on the real monotonic clock (with
a faked monotonic clock, Python's lock and Event timeouts never expire under libfaketime).
libfaketime 0.9.10 (Debian 12) mistranslates the absolute CLOCK_MONOTONIC deadline Python 3.11+
passes to ``clock_nanosleep`` in that mode (``time.sleep`` fails with EINVAL; fixed upstream
after 0.9.10, wolfcw/libfaketime#426), so ``time.sleep`` waits on an Event instead: the same
real monotonic clock, through a call libfaketime leaves alone.
"""

import threading
import time
from typing import SupportsIndex

_never = threading.Event()


def _sleep(seconds: "float | SupportsIndex") -> None:
    _never.wait(max(0.0, float(seconds)))


time.sleep = _sleep
