"""How a run moves from state to state, besides the worker's claim and record
(:mod:`.statements`) and the outbox's marks (:mod:`.outbox`).

Every transition is one conditional UPDATE on the state the run must be in for it to apply, so
two actors that race (an operator and a worker, a late worker and the leader's sweep, two copies
of one message) change a run at most once:

* **lost** — ``running`` whose worker stopped heartbeating: ``retrying`` as the next attempt or
  ``failed``, per the job's ``on_worker_lost`` (the leader's sweep, fenced);
* **retried** — ``failed`` back to ``pending`` as the next attempt (an operator);
* **cancelled** — a waiting run (``pending``, ``queued``, ``retrying``) that has not started
  (an operator);
* **discarded** — a message Celery dropped: revoked before it ran or while running
  (``cancelled``), expired before a worker took it (``missed``), or naming a task the worker
  does not have (``failed``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..dbtime import DbNow
from ..models import WAITING_STATUSES, JobRun, RunStatus
from .fence import Fence


@dataclass(frozen=True)
class LostRun:
    run: JobRun
    retried: bool
    reason: str


def recover_lost(
    *, now: datetime, lost_after: timedelta, fence: Fence, limit: int
) -> list[LostRun]:
    """Runs whose worker stopped heartbeating: retry them or fail them, per job policy."""
    recovered: list[LostRun] = []
    with fence.transaction(now):
        lost = (
            JobRun.objects.select_for_update()
            .select_related("job")
            .filter(status=RunStatus.RUNNING, heartbeat_at__lt=now - lost_after)
            .order_by("heartbeat_at")[:limit]
        )
        for run in lost:
            recovered.append(_recover(run, now))
    return recovered


def _recover(run: JobRun, now: datetime) -> LostRun:
    job = run.job
    seen = run.heartbeat_at or run.started_at or now
    ran_for = (now - run.started_at).total_seconds() if run.started_at else 0.0
    if job.time_limit and ran_for >= job.time_limit:
        reason = f"killed: hard time limit of {job.time_limit} s exceeded"
    else:
        reason = (
            f"worker lost: {run.worker or 'its worker'} stopped heartbeating at "
            f"{seen:%Y-%m-%d %H:%M:%S}Z"
        )
    retry = job.on_worker_lost == "retry" and run.attempt <= job.max_retries
    # The lost delivery's token goes: a late record of it must not take this for its own write.
    fields: dict[str, object] = {"error": reason, "finished_at": now, "claim_token": ""}
    if run.started_at:
        fields["duration"] = now - run.started_at
    if retry:
        fields.update(
            status=RunStatus.RETRYING, attempt=run.attempt + 1, retry_at=now, republish_at=now
        )
    else:
        fields.update(status=RunStatus.FAILED)
    JobRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING, attempt=run.attempt).update(**fields)
    for name, value in fields.items():
        setattr(run, name, value)
    return LostRun(run=run, retried=retry, reason=reason)


def retry_failed(run: JobRun) -> bool:
    """A ``failed`` run goes again: ``pending``, the next attempt. False if it was not failed."""
    return bool(
        JobRun.objects.filter(pk=run.pk, status=RunStatus.FAILED).update(
            status=RunStatus.PENDING, attempt=run.attempt + 1, retry_at=None, finished_at=None
        )
    )


def cancel_waiting(run: JobRun, reason: str) -> bool:
    """A run that has not started is ``cancelled``. False if it was not waiting."""
    return bool(
        JobRun.objects.filter(pk=run.pk, status__in=WAITING_STATUSES).update(
            status=RunStatus.CANCELLED, reason=reason[:255], finished_at=DbNow()
        )
    )


def record_discarded(
    run_id: int, task_id: str, attempt: int, *, terminated: bool, expired: bool, signum: Any
) -> str | None:
    """Celery dropped this message of the run: say why in its row; the status written, or None.

    An expired message (the job's ``expires``) makes the run ``missed``; a revoke before it
    started, or one that terminated it while running, makes it ``cancelled``. Each write is
    conditional on the run still being in the state that message could have moved it from, so
    a copy revoked after another copy ran changes nothing.
    """
    runs = JobRun.objects.filter(pk=run_id, task_id=task_id, attempt=attempt)
    if terminated:
        reason = f"terminated while running: revoked in Celery (signal {signum})"
        fields: dict[str, Any] = {"status": RunStatus.CANCELLED, "error": reason}
        runs = runs.filter(status=RunStatus.RUNNING)
    elif expired:
        reason = "its message expired before a worker took it (the job's expires option)"
        fields = {"status": RunStatus.MISSED}
        runs = runs.filter(status__in=WAITING_STATUSES)
    else:
        reason = "revoked in Celery before it started"
        fields = {"status": RunStatus.CANCELLED}
        runs = runs.filter(status__in=WAITING_STATUSES)
    if not runs.update(reason=reason[:255], finished_at=DbNow(), **fields):
        return None
    return str(fields["status"])


def record_unrunnable(run_id: int, task_id: str, attempt: int, error: str) -> bool:
    """A worker cannot run this message (it does not have the job's task): the run failed, if it
    was still waiting at this attempt. True if written."""
    runs = JobRun.objects.filter(
        pk=run_id, task_id=task_id, attempt=attempt, status__in=WAITING_STATUSES
    )
    return bool(runs.update(status=RunStatus.FAILED, error=error[:10_000], finished_at=DbNow()))
