"""What the scheduler depends on, up or down: one log line per change, and the back-off between
retries while something is down (the lease's backend, the database, the broker)."""

from __future__ import annotations

import logging
import time

logger = logging.getLogger("django_cluster_cron.scheduler")

BACKOFF_START = 0.5
BACKOFF_MAX = 10.0


class Health:
    """Logs one line when a dependency goes down or comes back, and paces retries."""

    def __init__(self) -> None:
        self._down: dict[str, float] = {}
        # When (monotonic) each component that is down went down: the health probe reads it.
        self.down_since: dict[str, float] = {}
        # When (monotonic) it last failed.
        self._failed_at: dict[str, float] = {}

    def down(self, component: str, error: BaseException) -> float:
        """Record a failure; return how long to back off."""
        backoff = self._down.get(component)
        if backoff is None:
            logger.error("%s.down error=%s", component, one_line(error))
            self.down_since[component] = time.monotonic()
            backoff = BACKOFF_START
        else:
            backoff = min(backoff * 2, BACKOFF_MAX)
        self._down[component] = backoff
        self._failed_at[component] = time.monotonic()
        return backoff

    def up(self, component: str) -> None:
        if self._down.pop(component, None) is not None:
            self.down_since.pop(component, None)
            self._failed_at.pop(component, None)
            logger.warning("%s.up", component)

    def is_down(self, component: str) -> bool:
        return component in self._down

    def failing_for(self, component: str) -> float:
        """From the first failure of ``component``'s current outage to its latest (seconds): how
        long it has been seen failing, by evidence; 0 while it is up."""
        since = self.down_since.get(component)
        if since is None:
            return 0.0
        return self._failed_at.get(component, since) - since


def one_line(error: BaseException) -> str:
    """An error as one short log-friendly line: its type and its words."""
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300]
