"""Single keypresses without Enter; the terminal's settings are put back however the demo ends."""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import tty
from collections.abc import Iterator


@contextlib.contextmanager
def cbreak() -> Iterator[None]:
    """Keys arrive one by one, unechoed; Ctrl-C still raises KeyboardInterrupt."""
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def read_key(timeout: float) -> str | None:
    """One key typed within ``timeout`` seconds, or None."""
    fd = sys.stdin.fileno()
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        return None
    data = os.read(fd, 32)  # an arrow key is several bytes: take them all, use the first
    return data[:1].decode(errors="replace") if data else None
