"""A job's overlap policy where its run executes: the per-job execution lock, and the release
of the runs the job holds back once a run has ended.

For a job whose policy is ``skip`` or ``buffer_one``, the run takes a :class:`~django_cluster_
cron.locks.ClusterLock` named ``job:<id>`` before its body: ``skip`` refuses the run while
another run of the job holds it; ``buffer_one`` lets one run wait for it (a second lock,
``job:<id>:waiting``, says one waits) and refuses any further one. ``buffer_all``,
``cancel_other`` and ``terminate_other`` hold their waiting runs back in the ledger instead
(``buffered``): when a run of such a job ends, the worker releases the next one and sends it
(:func:`release_next`); the leader's sweep does the same for a buffer whose runs ahead ended
elsewhere.
"""

from __future__ import annotations

import logging
from datetime import datetime

from ..conf import app_settings
from ..core.overlap import BUFFERING, OverlapPolicy
from ..dispatch import publish_now
from ..leases.lock import ClusterLock
from ..ledger import buffer
from ..ledger.outbox import OutboxMessage
from ..ledger.statements import holds_back
from ..models import FINAL_STATUSES, JobDefinition, JobRun, RunTrigger
from ..ops import metrics
from .outcome import Delivery

logger = logging.getLogger("django_cluster_cron.worker")


class SkipRun(Exception):
    """The overlap policy refused this run at execution time (the message says why)."""


def overlap_gate(job: JobDefinition) -> ClusterLock | None:
    """Take the job's execution lock if its policy needs one (None if it needs none); raise
    :class:`SkipRun` if refused, ``LockUnavailable`` if the lock's backend cannot be reached."""
    if job.overlap_policy not in (OverlapPolicy.SKIP.value, OverlapPolicy.BUFFER_ONE.value):
        return None
    ttl = app_settings.RUN_LOST_AFTER.total_seconds()
    lock = ClusterLock(f"job:{job.pk}", ttl=ttl)
    if lock.acquire():
        return lock
    if job.overlap_policy == OverlapPolicy.SKIP.value:
        raise SkipRun("overlap policy 'skip': another run of this job is executing")
    waiter = ClusterLock(f"job:{job.pk}:waiting", ttl=ttl)
    if not waiter.acquire():
        raise SkipRun("overlap policy 'buffer_one': a run is already waiting")
    try:
        blocking = ClusterLock(f"job:{job.pk}", ttl=ttl, blocking=True)
        blocking.acquire()
        return blocking
    finally:
        waiter.release()


def release_quietly(gate: ClusterLock) -> None:
    """Release the job's lock after its run; a failure only logs (the lock expires with its
    TTL, and the run's outcome is what matters)."""
    try:
        gate.release()
    except Exception as exc:
        logger.warning("run.overlap_release_failed lock=%s error=%s", gate.name, exc)


def release_next(delivery: Delivery, run: JobRun, status: str | None, now: datetime) -> None:
    """After a run's final record: if its job may hold runs back (its policy buffers, or an
    operator's run or backfill was buffered by an override), release the next and send it the
    way this run came. A failure only logs: the leader's sweep releases it later."""
    if status is None or status not in FINAL_STATUSES:
        return
    job = run.job
    if OverlapPolicy(job.overlap_policy) not in BUFFERING and run.trigger not in OVERRIDABLE:
        return
    try:
        if not holds_back(job.pk):  # the usual case, on the worker's own connection
            return
        released = buffer.release([job.pk], now=now)
        found = metrics.get()
        found.not_run(job.name, "catchup_window", released.aged[job.name])
        found.not_run(job.name, "paused", released.dropped[job.name])
        messages = [OutboxMessage.for_run(next_run) for next_run in released.runs]
        for next_run in released.runs:
            logger.info("run.released run=%s job=%s after=%s", next_run.pk, job.pk, run.pk)
        if messages:
            publish_now(delivery.dispatcher(), messages, now=now)
    except Exception as exc:
        logger.warning("run.release_failed job=%s error=%s", job.pk, exc)


# Triggers an operator may give another overlap policy (run now, backfill).
OVERRIDABLE = (RunTrigger.MANUAL, RunTrigger.BACKFILL)
