"""Every move of a run from one state to another, each a named function here (or, for the moves
made many runs at a time, in the module named by the state table, :mod:`.states`).

Each function builds the fields its move writes and is one conditional UPDATE on the states the
run may leave by it, so two actors that race (an operator and a worker, a late worker and the
leader's sweep, two copies of one message) change a run at most once; it returns whether it
wrote. Who calls which, and from which state to which, is the table in :mod:`.states` (and in
``RunStatus``'s docstring); a test fails when a write path moves a run outside it.

* the worker's endings of a run it claimed — :func:`succeeded`, :func:`failed`,
  :func:`retrying` (the next attempt), :func:`skipped`, :func:`missed`, and :func:`stopped`
  (cancelled while it ran) — written by the compiled finish statement
  (:func:`.statements.finish_run`), guarded on ``running`` at this attempt and, but for
  :func:`stopped`, on no cancel asked for: a cancel that reached the row first makes the end
  ``cancelled``, one that came after finds the run ended, so a race resolves to one state;
* the leader's sweeps: runs whose worker stopped heartbeating — :func:`lost`; runs asked to
  stop that outlasted their job's ``cancel_grace`` — :func:`terminating`;
* an operator's moves — :func:`retried` (a failed run goes again), :func:`cancelled` (a run
  that has not started), :func:`cancel_requested` (a running one: its body sees it at its next
  heartbeat);
* an execution system that dropped a run's message — :func:`discarded` (revoked, expired) and
  :func:`unrunnable` (its task cannot be run or enqueued).

:func:`next_attempt` is the one way a run's next attempt is written, whoever starts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from ..celery_app import TERMINABLE_POOLS
from ..dbtime import DbNow
from ..models import (
    EXECUTING_STATUSES,
    WAITING_STATUSES,
    JobRun,
    RunStatus,
    WorkerLostPolicy,
)
from .fence import Fence
from .statements import finish_run


def stop_requester(policy: str) -> str:
    """Who asks a run to stop when a newer slot of its job preempts it (``cancel_other``,
    ``terminate_other``): what its ``cancel_requested_by`` says."""
    return f"overlap policy {policy}"


# The leader terminates a run this policy asked to stop at once (no grace).
TERMINATE_OTHER = stop_requester("terminate_other")

# How much of each text the ledger keeps.
REASON_LIMIT = 255
ERROR_LIMIT = 10_000
TRACE_LIMIT = 50_000
RESULT_LIMIT = 1000


def next_attempt(run: JobRun, *, at: datetime | None) -> dict[str, Any]:
    """The fields of ``run``'s next attempt: its attempt number up by one. With ``at`` it waits
    as ``retrying`` until then (its message counts as unsent until it is confirmed sent: the
    outbox's re-publish time is ``at`` too); without, it is ``pending`` at once (sent now)."""
    if at is None:
        return {"status": RunStatus.PENDING, "attempt": run.attempt + 1, "retry_at": None}
    return {
        "status": RunStatus.RETRYING,
        "attempt": run.attempt + 1,
        "retry_at": at,
        "republish_at": at,
    }


# -- the worker's endings of a run it claimed --------------------------------------------------


def _finish(run: JobRun, duration: timedelta | None, fields: dict[str, Any]) -> bool:
    """Write a final state if the run is still ``running`` at its attempt (a late finish after
    it was declared lost changes nothing); its ``finished_at`` is the database's time, its
    ``duration`` what the worker measured unless ``fields`` says otherwise. The instance takes
    the fields once they are written (``finished_at`` as the start plus the duration); unwritten,
    it keeps the attempt it had (the end may then be written another way: :func:`stopped`)."""
    fields.setdefault("duration", duration)
    written = finish_run(run.pk, run.attempt, fields, getattr(run, "claim_token", ""))
    if not written:
        return False
    for name, value in fields.items():
        setattr(run, name, value)
    if run.started_at is not None and duration is not None:
        run.finished_at = run.started_at + duration
    return True


def succeeded(run: JobRun, *, result: str, duration: timedelta) -> bool:
    """``running`` → ``success``: the body returned; ``result`` is what the ledger keeps of it."""
    fields = {"status": RunStatus.SUCCESS, "result": result[:RESULT_LIMIT], "error": ""}
    return _finish(run, duration, fields)


def failed(run: JobRun, *, error: str, trace: str, duration: timedelta) -> bool:
    """``running`` → ``failed``: the last attempt failed, or a failure no retry can fix."""
    fields = {
        "status": RunStatus.FAILED,
        "error": error[:ERROR_LIMIT],
        "traceback": trace[:TRACE_LIMIT],
    }
    return _finish(run, duration, fields)


def retrying(
    run: JobRun, *, retry_at: datetime, error: str, trace: str, duration: timedelta
) -> bool:
    """``running`` → ``retrying``: the attempt failed and the next is due at ``retry_at``
    (database time)."""
    fields = next_attempt(run, at=retry_at)
    fields.update(error=error[:ERROR_LIMIT], traceback=trace[:TRACE_LIMIT])
    return _finish(run, duration, fields)


def skipped(run: JobRun, *, reason: str, duration: timedelta) -> bool:
    """``running`` → ``skipped``: refused by its job's overlap policy once claimed, or its task
    chose not to do the work."""
    return _finish(run, duration, {"status": RunStatus.SKIPPED, "reason": reason[:REASON_LIMIT]})


def missed(run: JobRun, *, reason: str) -> bool:
    """``running`` → ``missed``: claimed too late for its job's catch-up policy; recorded as if
    it never started (the body did not run)."""
    fields = {
        "status": RunStatus.MISSED,
        "reason": reason[:REASON_LIMIT],
        "started_at": None,
        "heartbeat_at": None,
        "duration": None,
    }
    return _finish(run, None, fields)


def stopped(run: JobRun, *, error: str, trace: str, duration: timedelta) -> bool:
    """``running`` → ``cancelled``: the body ended (stopped, returned or failed) after its
    cancel was asked for; ``error`` says what it had done (its partial outcome)."""
    fields = {
        "status": RunStatus.CANCELLED,
        "error": error[:ERROR_LIMIT],
        "traceback": trace[:TRACE_LIMIT],
    }
    return _finish(run, duration, fields)


# -- the leader's sweep ------------------------------------------------------------------------


@dataclass(frozen=True)
class LostRun:
    run: JobRun
    retried: bool
    reason: str


def lost(*, now: datetime, lost_after: timedelta, fence: Fence, limit: int) -> list[LostRun]:
    """``running`` → ``retrying`` (the next attempt) or ``failed``, per the job's
    ``on_worker_lost``: runs whose worker stopped heartbeating ``lost_after`` ago (the leader's
    sweep, fenced). A run whose cancel was asked for is ``cancelled`` instead (never retried),
    and so is one being terminated."""
    recovered: list[LostRun] = []
    with fence.transaction(now):
        silent = (
            JobRun.objects.select_for_update()
            .select_related("job")
            .filter(status__in=EXECUTING_STATUSES, heartbeat_at__lt=now - lost_after)
            .order_by("heartbeat_at")[:limit]
        )
        for run in silent:
            recovered.append(_lose(run, now))
    return recovered


def _lose(run: JobRun, now: datetime) -> LostRun:
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
    stopping = run.cancel_requested_at is not None or run.status == RunStatus.TERMINATING
    if stopping:
        reason = f"cancelled: {reason}"
    retry = (
        not stopping
        and job.on_worker_lost == str(WorkerLostPolicy.RETRY)
        and run.attempt <= job.max_retries
    )
    # The lost delivery's token goes: a late record of it must not take this for its own write.
    fields: dict[str, Any] = {"error": reason, "finished_at": now, "claim_token": ""}
    if run.started_at:
        fields["duration"] = now - run.started_at
    if stopping:
        fields["status"] = RunStatus.CANCELLED
    else:
        fields.update(next_attempt(run, at=now) if retry else {"status": RunStatus.FAILED})
    JobRun.objects.filter(pk=run.pk, status=run.status, attempt=run.attempt).update(**fields)
    for name, value in fields.items():
        setattr(run, name, value)
    return LostRun(run=run, retried=retry, reason=reason)


def terminating(*, now: datetime, fence: Fence, limit: int) -> list[JobRun]:
    """``running`` → ``terminating``: runs asked to stop longer ago than their job's
    ``cancel_grace``, on a worker whose pool can terminate them (the leader's sweep, fenced);
    the leader then has their worker stop them. A run on a pool that cannot is left to stop by
    itself."""
    found: list[JobRun] = []
    asked_any = JobRun.objects.filter(status=RunStatus.RUNNING, cancel_requested_at__isnull=False)
    if not asked_any.exists():  # the usual sweep: no fenced transaction for nothing
        return found
    with fence.transaction(now):
        asked = (
            JobRun.objects.select_for_update()
            .select_related("job")
            .filter(
                Q(job__cancel_grace__isnull=False) | Q(cancel_requested_by=TERMINATE_OTHER),
                status=RunStatus.RUNNING,
                cancel_requested_at__isnull=False,
                worker_pool__in=TERMINABLE_POOLS,
                piece_count=0,  # a run split into pieces stops through them
            )
            .order_by("cancel_requested_at")[:limit]
        )
        for run in asked:
            grace = timedelta(seconds=run.job.cancel_grace or 0)
            if run.cancel_requested_by == TERMINATE_OTHER:  # the policy stops it at once
                grace = timedelta(0)
            if run.cancel_requested_at is None or run.cancel_requested_at + grace > now:
                continue
            if JobRun.objects.filter(
                pk=run.pk, status=RunStatus.RUNNING, attempt=run.attempt
            ).update(status=RunStatus.TERMINATING):
                run.status = RunStatus.TERMINATING
                found.append(run)
    return found


def still_terminating(*, now: datetime, after: timedelta, skip: set[int]) -> list[JobRun]:
    """Runs ``terminating`` for their job's ``cancel_grace`` again (at least ``after``) since
    their SIGTERM was due: a body that outlived it (no state changes; ``skip``: runs already
    dealt with)."""
    found = []
    runs = JobRun.objects.select_related("job").filter(status=RunStatus.TERMINATING)
    for run in runs.exclude(pk__in=skip)[:100]:
        grace = timedelta(seconds=run.job.cancel_grace or 0)
        asked = run.cancel_requested_at or now
        if asked + grace + max(grace, after) <= now:
            found.append(run)
    return found


# -- an operator's moves -----------------------------------------------------------------------


def retried(run: JobRun) -> bool:
    """``failed`` → ``pending``, the next attempt (sent at once)."""
    fields = {**next_attempt(run, at=None), "finished_at": None}
    return bool(JobRun.objects.filter(pk=run.pk, status=RunStatus.FAILED).update(**fields))


# What an operator's backfill that reprocesses every run of its range runs again besides
# ``failed`` (:func:`retried`): a run split into pieces is not among them (retry its pieces).
RERUNNABLE = (
    RunStatus.SUCCESS,
    RunStatus.SKIPPED,
    RunStatus.MISSED,
    RunStatus.CANCELLED,
    RunStatus.UNCERTAIN,
)


def rerun(run: JobRun) -> bool:
    """A run that ended otherwise than ``failed`` (and has no pieces) → ``pending``, the next
    attempt (sent at once); how it had ended is cleared, a cancel asked of it included (the
    new attempt would stop at once, and its end could not be written)."""
    fields = {
        **next_attempt(run, at=None),
        "finished_at": None,
        "reason": "",
        "result": "",
        "error": "",
        "traceback": "",
        "duration": None,
        "cancel_requested_at": None,
        "cancel_requested_by": "",
    }
    return bool(
        JobRun.objects.filter(pk=run.pk, status__in=RERUNNABLE, piece_count=0).update(**fields)
    )


def cancelled(run: JobRun, reason: str) -> bool:
    """A run that has not started (``pending``, ``queued``, ``retrying``, ``buffered``) →
    ``cancelled``."""
    not_started = (*WAITING_STATUSES, RunStatus.BUFFERED)
    return bool(
        JobRun.objects.filter(pk=run.pk, status__in=not_started).update(
            status=RunStatus.CANCELLED, reason=reason[:REASON_LIMIT], finished_at=DbNow()
        )
    )


def cancel_requested(run: JobRun, *, by: str, reason: str) -> bool:
    """Ask a ``running`` run to stop (who, why; when is the database's now): no change of
    state — the body sees it at its next heartbeat, and its end is recorded ``cancelled``
    (:func:`stopped`). Asked once: a second request changes nothing."""
    return bool(
        JobRun.objects.filter(
            pk=run.pk, status=RunStatus.RUNNING, cancel_requested_at__isnull=True
        ).update(
            cancel_requested_at=DbNow(),
            cancel_requested_by=by[:255],
            reason=reason[:REASON_LIMIT],
        )
    )


# -- messages an execution system dropped ------------------------------------------------------


def discarded(
    run_id: int, task_id: str, attempt: int, *, terminated: bool, expired: bool, signum: Any
) -> str | None:
    """The execution system dropped this message of the run: say why in its row; the status
    written, or None.

    An expired message (the job's ``expires``) makes a waiting run ``missed``; a revoke before
    it started makes it ``cancelled``, one that terminated it while running (``running``)
    ``cancelled`` too. Each write is conditional on the run still being in the state that
    message could have moved it from, so a copy revoked after another copy ran changes nothing.
    """
    runs = JobRun.objects.filter(pk=run_id, task_id=task_id, attempt=attempt)
    if terminated:
        reason = f"terminated while running: revoked in Celery (signal {signum})"
        fields: dict[str, Any] = {"status": RunStatus.CANCELLED, "error": reason}
        runs = runs.filter(status__in=EXECUTING_STATUSES)
    elif expired:
        reason = "its message expired before a worker took it (the job's expires option)"
        fields = {"status": RunStatus.MISSED}
        runs = runs.filter(status__in=WAITING_STATUSES)
    else:
        reason = "revoked in Celery before it started"
        fields = {"status": RunStatus.CANCELLED}
        runs = runs.filter(status__in=WAITING_STATUSES)
    if not runs.update(reason=reason[:REASON_LIMIT], finished_at=DbNow(), **fields):
        return None
    return str(fields["status"])


def unrunnable(run_id: int, task_id: str, attempt: int, error: str) -> bool:
    """A waiting run's task cannot be run (a worker does not have it) or enqueued (its backend
    refuses it) → ``failed``, if it still waits at this attempt."""
    runs = JobRun.objects.filter(
        pk=run_id, task_id=task_id, attempt=attempt, status__in=WAITING_STATUSES
    )
    return bool(
        runs.update(status=RunStatus.FAILED, error=error[:ERROR_LIMIT], finished_at=DbNow())
    )
