"""The change signal: wake the schedulers at once when a job changes or the leader steps down.

Saving a job publishes a change through the lease backend after the transaction commits (Redis:
a pub/sub message; PostgreSQL with the database lease: ``NOTIFY``; elsewhere nothing, and the
schedulers poll). The leader's sleep listens, so an edited job's new ``next_run_at`` is honoured
without a fixed tick, and a standby takes over right after a leader releases the lease. Losing a
message costs at most one sleep: every sleeper also has a timeout.
"""

from __future__ import annotations

from typing import Any

from ..leases import get_backend


def publish_change(reason: str) -> None:
    """Tell the schedulers something changed. Never raises: the timeout is the fallback."""
    get_backend().publish_change(reason)


def job_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``post_save``/``post_delete`` receiver for JobDefinition."""
    from django.db import transaction

    transaction.on_commit(lambda: publish_change(f"job:{instance.pk}"))
