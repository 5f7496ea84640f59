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
import uuid
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connection

from ..coordination import get_coordination
from ..dbconn import read_only_error
from ..ledger.statements import claim_run, claimed_by, reset_connection, seconds_until_due
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

# How long a worker keeps trying its claim or its record while the database is switching over
# (a primary promoted, a demoted one refusing writes): seconds, and the waits between tries.
SWITCHOVER_BUDGET = 30.0
RETRY_FIRST = 0.2
RETRY_MAX = 5.0


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection is no use (broken, or on a server that refuses
    writes) rather than that the statement was wrong."""
    return isinstance(exc, (InterfaceError, OperationalError)) or read_only_error(exc)


def through_switchover(action: Callable[[bool], T], budget: float = SWITCHOVER_BUDGET) -> T:
    """Run a ledger write, ``action(retried)``. While its connection breaks or reaches a server
    that refuses writes, close it and try again on a fresh one (to whatever the address names
    now), with waits that double, for up to ``budget`` seconds: a switchover takes a moment,
    and a run left 'running' without its record would be declared lost. The writes are
    conditional and carry the delivery's token, so a try whose answer was lost after it
    committed is recognised by the next (``retried`` is then True)."""
    deadline = time.monotonic() + budget
    delay = RETRY_FIRST
    retried = False
    while True:
        try:
            return action(retried)
        except DatabaseError as exc:
            if not connection_lost(exc) or time.monotonic() + delay > deadline:
                raise
            logger.warning(
                "run.db_reconnect error=%s read_only=%s retry_in=%.1fs",
                " ".join(str(exc).split())[:200],
                int(read_only_error(exc)),
                delay,
            )
            reset_connection()
            connection.close()
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)
            retried = True


# Where a wait would hold up more than one run (Celery's main process records a revoked or an
# unknown task's run from a signal handler): one quick try more, then the outbox's turn.
QUICK_BUDGET = 1.0


def with_fresh_connection(action: Callable[[], T], budget: float = SWITCHOVER_BUDGET) -> T:
    """:func:`through_switchover` for a write that needs no token to be retried (it is
    conditional on a state only its first try leaves)."""
    return through_switchover(lambda _retried: action(), budget)


def new_token() -> str:
    """A delivery's own token, written by its claim (:func:`claim`)."""
    return uuid.uuid4().hex


# A message that arrives before its run is due (its publisher's clock estimate was off by a
# few milliseconds) waits this long at most, then claims again; one earlier than that is left to
# the leader's outbox, which sends it again once the run is due.
EARLY_WAIT_LIMIT = 5.0


def claim(
    run_id: int,
    task_id: str,
    attempt: int,
    result_id: str = "",
    token: str = "",
    retried: bool = False,
    pool: str = "",
) -> JobRun | None:
    """Take the run for this delivery (one delivery can win); stamps are database time.

    The claim only takes a run that is due: a message early by up to ``EARLY_WAIT_LIMIT``
    waits for it; an earlier one is acknowledged without running (``run.early_message``).
    ``token`` is this delivery's own: a claim ``retried`` after its answer was lost finds the
    run it claimed then by it. ``pool``: how this worker runs tasks (kept on the run: whether
    it can be terminated).
    """
    for _ in range(3):
        run = claim_run(run_id, task_id, attempt, worker_name(), result_id, token, pool)
        if run is not None:
            return run
        if retried and token:
            mine = claimed_by(run_id, attempt, token)
            if mine is not None:
                logger.warning("run.claim_recovered run=%s attempt=%s", run_id, attempt)
                return mine
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
