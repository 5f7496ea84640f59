"""Helpers for testing code that drives the scheduler or takes cluster locks (our tests and yours).

* :func:`run_due`: run the slots due at a given ``now`` synchronously — the real planner,
  catch-up and overlap policies and ledger, the job's task executed in-process — with no
  scheduler process, no broker and no worker.
* :func:`ledger` and :func:`assert_ran`: read and check what the ledger recorded.
* :class:`NoWait`: a sleeper that never sleeps, so a test steps a real scheduler by hand.
* :class:`MemoryLeaseBackend`: leases and cluster locks in this process's memory, for tests that
  should not need Redis. Either set ``CLUSTER_CRON["LEASE_BACKEND"] = "memory"`` in your test
  settings (every ``cluster_lock`` then uses one shared in-memory backend, and the node reports,
  counters and change signal live in memory beside it; silence check ``cluster_cron.W003``
  there), or pass one explicitly: ``ClusterLock("name", backend=MemoryLeaseBackend())``.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime
from typing import Any

from .leases.memory import MemoryLease, MemoryLeaseBackend

__all__ = ["MemoryLease", "MemoryLeaseBackend", "NoWait", "assert_ran", "ledger", "run_due"]

TEST_NODE = "testing"


class NoWait:
    """A scheduler sleeper that never sleeps: each ``Scheduler.step()`` runs back to back.

    ``build_scheduler(node_id="t", sleeper=NoWait())`` gives a real scheduler (real lease,
    database and broker) that a test steps by hand.
    """

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        return False

    def close(self) -> None:
        pass


def run_due(now: datetime | None = None, *, execute: bool = True) -> list[Any]:
    """Decide every slot due at ``now`` (default: the database's time) as the leader would, and
    run each recorded run's task here and now; return the runs recorded, oldest slot first.

    The planner, the catch-up window and policy, the overlap policy and the unique slot are
    the real ones, and so is the ledger: missed and skipped slots are recorded as the
    scheduler records them. Each run is delivered as its job's own task with Celery's
    ``apply()`` (in-process: no broker, no worker; Celery's task signals fire as on a
    worker), or, for a ``django.tasks`` task, as the wrapper a backend's worker runs, on an
    immediate backend; so its claim, its status and its retries are the real ones too; a
    retry is recorded as ``retrying`` and not run again (call ``run_due`` later, or
    ``execute=False`` to only record). Runs an overlap policy held back (``buffer_all``) run
    here too, in their turn; a run split into pieces has each piece delivered here too, in
    index order, then its completion task. Jobs whose overlap policy takes a lock need a lease
    backend: set ``CLUSTER_CRON["LEASE_BACKEND"] = "memory"`` in test settings if there is no
    Redis.
    """
    from . import djtasks
    from .celery_app import get_celery_app
    from .dbtime import database_now
    from .djtasks_app import resolve_task
    from .ledger.fence import Fence
    from .ledger.outbox import OutboxMessage, mark_published
    from .ledger.pieces import piece_message
    from .models import JobPiece, JobRun, PieceStatus, RunStatus
    from .scheduler.recording import Recorder
    from .worker.celery import deliver_here

    now = now or database_now()
    recorder = Recorder()
    fence = Fence.claim(TEST_NODE, f"{TEST_NODE}:{uuid.uuid4().hex}")
    recorded: list[str] = []

    def deliver(messages: list[Any]) -> None:
        # Due at ``now`` by definition, even if the database's own clock has not got there yet
        # (a test that plays "tomorrow at 03:00"): the claim compares with that clock.
        runs = [m.run_id for m in messages if m.piece is None]
        JobRun.objects.filter(pk__in=runs).update(due_at=None)
        for message in messages:
            if resolve_task(message.task) is not None:
                djtasks.deliver_here(message)
            else:
                deliver_here(get_celery_app(), message)

    while True:
        batch = recorder.schedule_due(now=now, fence=fence, node_id=TEST_NODE, limit=500)
        recorded += [m.task_id for m in batch.messages]
        mark_published(batch.messages, now=now, fence=fence)
        if execute:
            deliver(batch.messages)
        if batch.jobs < 500:
            break
    # Runs their job's overlap policy held back (buffer_all, cancel_other) go in their turn, as
    # each run ahead ends: each released run is delivered here too, oldest slot first.
    while execute:
        held = JobRun.objects.filter(
            dispatched_by=TEST_NODE, status__in=(RunStatus.PENDING, RunStatus.QUEUED)
        ).exclude(task_id__in=recorded)
        released = [OutboxMessage.for_run(run) for run in held.select_related("job")]
        if not released:
            break
        recorded += [m.task_id for m in released]
        deliver(sorted(released, key=lambda message: message.scheduled_for))
    # Runs split into pieces: each piece sent is delivered here too (and the pieces a piece's
    # end releases, and the completion message), until none is left to send.
    delivered: set[tuple[str, int]] = set()
    while execute:
        sent = JobPiece.objects.filter(
            run__task_id__in=recorded, status=PieceStatus.QUEUED
        ).select_related("run__job")
        pieces = [piece_message(piece.run, piece) for piece in sent.order_by("run_id", "index")]
        fresh = [m for m in pieces if (m.task_id, m.attempt) not in delivered]
        if not fresh:  # none left, or only ones this loop could not take (never loop on them)
            break
        delivered.update((m.task_id, m.attempt) for m in fresh)
        deliver(fresh)
    runs = JobRun.objects.filter(task_id__in=recorded).select_related("job")
    return sorted(runs, key=lambda run: (run.scheduled_for, run.job_id))


def ledger(job: Any = None, *, status: str | None = None) -> list[Any]:
    """Runs in the ledger (of ``job``, in ``status``), oldest slot first."""
    from .models import JobRun

    runs = JobRun.objects.select_related("job").order_by("scheduled_for", "job_id")
    if job is not None:
        runs = runs.filter(job=job)
    if status is not None:
        runs = runs.filter(status=status)
    return list(runs)


def assert_ran(
    job: Any, *, at: datetime | None = None, status: str = "success", times: int = 1
) -> list[Any]:
    """Assert that ``job`` has ``times`` runs in ``status`` (for the slot ``at``, if given); return
    them. The message lists what the ledger holds instead."""
    runs = [r for r in ledger(job, status=status) if at is None or r.scheduled_for == at]
    if len(runs) != times:
        held = ", ".join(
            f"{r.scheduled_for:%Y-%m-%d %H:%M:%S}Z {r.status}"
            + (f" ({r.reason or r.error})" if r.reason or r.error else "")
            for r in ledger(job)
        )
        slot = f" for {at:%Y-%m-%d %H:%M:%S}Z" if at else ""
        raise AssertionError(
            f"expected {times} {status} run(s) of {job}{slot}, found {len(runs)}; the ledger "
            f"holds: {held or 'nothing'}"
        )
    return runs
