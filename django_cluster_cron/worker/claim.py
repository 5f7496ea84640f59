"""The claim: one delivery of a run's message wins it, every other copy is dropped.

``UPDATE jobrun SET status='running' … WHERE id = <run> AND task_id = <this message's id> AND
attempt = <the message's attempt> AND status IN ('pending', 'queued', 'retrying') AND (due_at IS
NULL OR due_at <= now)`` (:mod:`django_cluster_cron.ledger.statements`). Exactly one delivery of
a message can match; every other copy (outbox re-publish, broker redelivery, a stale leader's
publish, a forged or late message) matches nothing, is counted as a duplicate delivery and
acknowledged without running anything. A message that arrives a moment before its run is due
waits for it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError, connection

from ..coordination import get_coordination
from ..ledger.statements import claim_run, reset_connection, seconds_until_due
from ..models import JobRun
from ..ops import metrics

logger = logging.getLogger("django_cluster_cron.worker")


_worker_name: tuple[int, str] = (0, "")


def worker_name() -> str:
    """``host:pid`` of this process (computed once per process)."""
    global _worker_name
    pid = os.getpid()
    if _worker_name[0] != pid:
        _worker_name = (pid, f"{socket.gethostname()}:{pid}")
    return _worker_name[1]


class EarlyMessage(Exception):
    """A message for a run not due for a while: dropped, not counted as a duplicate."""


T = TypeVar("T")


def with_fresh_connection(action: Callable[[], T]) -> T:
    """Run a ledger write; if the connection broke (the body may have left it dead, or the
    server dropped it), reconnect and try once more — the writes are conditional, so a repeat
    is harmless — instead of leaving the run 'running' until it is declared lost."""
    try:
        return action()
    except (InterfaceError, OperationalError) as exc:
        logger.warning("run.db_reconnect error=%s", exc)
        reset_connection()
        connection.close()
        return action()


def message_header(request: Any, name: str) -> object:
    """A header of the delivered message: Celery puts a message's headers in its request (a
    worker's delivery) or, for ``apply(headers=...)``, under ``request.headers``."""
    get = getattr(request, "get", None)
    if get is None:
        return None
    value = get(name)
    if value is None:
        headers = get("headers")
        if isinstance(headers, Mapping):
            value = headers.get(name)
    return value


def is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


# A message that arrives before its run is due (its publisher's clock estimate was off by a
# few milliseconds) waits this long at most, then claims again; one earlier than that is left to
# the leader's outbox, which sends it again once the run is due.
EARLY_WAIT_LIMIT = 5.0


def claim(run_id: int, task_id: str, attempt: int, result_id: str = "") -> JobRun | None:
    """Take the run for this delivery (one delivery can win); stamps are database time.

    The claim only takes a run that is due: a message early by up to ``EARLY_WAIT_LIMIT``
    waits for it; an earlier one is acknowledged without running (``run.early_message``).
    """
    for _ in range(3):
        run = claim_run(run_id, task_id, attempt, worker_name(), result_id)
        if run is not None:
            return run
        wait = seconds_until_due(run_id, task_id, attempt)
        if wait is None:
            return None
        if wait > EARLY_WAIT_LIMIT:
            logger.warning(
                "run.early_message run=%s task_id=%s due_in=%.3fs: not run; the outbox sends it "
                "again once it is due",
                run_id,
                task_id,
                wait,
            )
            raise EarlyMessage(run_id)
        time.sleep(wait + 0.001)
    return None


DUPLICATES = "duplicate_deliveries"


def count_duplicate(run_id: object, task_id: object) -> None:
    """A delivery that lost the claim: log it and bump the cluster-wide counter."""
    logger.info("run.duplicate_delivery run=%s task_id=%s", run_id, task_id)
    metrics.get().duplicates.inc()
    get_coordination().counters.incr(DUPLICATES)


def duplicate_deliveries() -> int:
    """Deliveries dropped by the claim, cluster-wide, since the counter was created."""
    return get_coordination().counters.value(DUPLICATES)
