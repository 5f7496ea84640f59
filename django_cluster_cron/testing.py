"""Helpers for testing code that drives the scheduler (this project's tests and yours)."""

from __future__ import annotations

import threading


class NoWait:
    """A scheduler sleeper that never sleeps: each ``Scheduler.step()`` runs back to back.

    ``build_scheduler(node_id="t", sleeper=NoWait())`` gives a real scheduler (real lease,
    database and broker) that a test steps by hand.
    """

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        return False

    def close(self) -> None:
        pass
