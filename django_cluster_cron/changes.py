"""The change signal: wake the schedulers at once when a job changes or the leader steps down.

Saving a job in the admin publishes a message on a Redis pub/sub channel after the transaction
commits; the leader's sleep listens on it, so an edited job's new ``next_run_at`` is honoured
without a fixed polling tick, and a standby takes over right after a leader releases the lease.
Losing a message costs at most one sleep: every sleeper also has a timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from .conf import app_settings

logger = logging.getLogger("django_cluster_cron.scheduler")

# A sleeper checks for shutdown at least this often even when no message comes.
WAIT_SLICE = 0.25


def channel_name() -> str:
    return f"{app_settings.KEY_PREFIX}:changes"


def _redis() -> Any:
    from django_redis import get_redis_connection

    return get_redis_connection(app_settings.REDIS_ALIAS)


def publish_change(reason: str) -> None:
    """Tell the schedulers something changed. Never raises: the timeout is the fallback."""
    try:
        _redis().publish(channel_name(), reason)
    except Exception as exc:  # Redis down: the scheduler notices on its next timed wake-up.
        logger.debug("changes.publish_failed reason=%s error=%s", reason, exc)


def job_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``post_save``/``post_delete`` receiver for JobDefinition."""
    from django.db import transaction

    transaction.on_commit(lambda: publish_change(f"job:{instance.pk}"))


class ChangeListener:
    """Sleeps until a change message, the timeout or ``stop`` — whichever comes first."""

    def __init__(self, client: Any = None, channel: str | None = None) -> None:
        self._client = client
        self._channel = channel or channel_name()
        self._pubsub: Any = None

    def _subscribe(self) -> Any:
        if self._pubsub is None:
            client = self._client if self._client is not None else _redis()
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(self._channel)
            self._pubsub = pubsub
        return self._pubsub

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        """Return True if woken by a change message, False on timeout or stop."""
        deadline = time.monotonic() + max(0.0, timeout)
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                message = self._subscribe().get_message(timeout=min(remaining, WAIT_SLICE))
            except Exception:
                # Redis is unreachable: the scheduler's health log reports that; sleep instead.
                self.close()
                stop.wait(min(remaining, WAIT_SLICE))
                continue
            if message is not None:
                self._drain()
                return True
        return False

    def _drain(self) -> None:
        # Several saves in a row wake the scheduler once.
        try:
            while self._pubsub is not None and self._pubsub.get_message(timeout=0) is not None:
                pass
        except Exception:
            self.close()

    def close(self) -> None:
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            except Exception:
                logger.debug("changes.close_failed", exc_info=True)
            self._pubsub = None
