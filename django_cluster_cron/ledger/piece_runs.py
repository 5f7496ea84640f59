"""A run's fate, from its pieces: the update that closes it.

The run's status follows from its pieces (:func:`settle`), under its row lock: once the failed
pieces pass ``max_failed_pieces``, its cancel is asked for, or a success policy short of "all"
is met, the pieces not started are cancelled and the running ones asked to stop; when no piece is
open any more, one conditional UPDATE closes the run (:func:`close_run`) — ``success``,
``failed`` or ``cancelled`` — and the transaction that wins it records the completion message
(index -1, the job's ``on_complete``), so it is sent exactly once whoever closes the run: the
worker of its last piece, or the leader's sweep as a backstop. Until then, each settle releases
the next pieces the job's parallel cap allows.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from django.db import connections, router, transaction
from django.db.models import Count, Exists, F, OuterRef

from .. import signals
from ..dbtime import database_now
from ..models import (
    COMPLETION,
    OPEN_PIECE_STATUSES,
    JobPiece,
    JobRun,
    PieceStatus,
    PieceSuccess,
    RunStatus,
)
from . import failures, piece_statements
from .piece_moves import cancel_pieces
from .pieces import _republish_at, piece_task_id, release
from .transitions import ERROR_LIMIT

__all__ = ["Settled", "close_run", "note_closed", "progress", "progress_of", "settle"]

# How many failed pieces a completion summary names (their keys and errors).
SUMMARY_FAILED = 100


@dataclasses.dataclass
class Settled:
    """What settling a run did: the status it closed the run with (None: still open, or not
    this call's to close), and the pieces to send now (released ones, the completion
    message)."""

    closed: str | None = None
    send: list[JobPiece] = dataclasses.field(default_factory=list)
    run: JobRun | None = None
    # Pieces this settle cancelled before they started (for the metrics).
    cancelled: int = 0


class _Tally:
    """How many of a run's pieces are in given states, each count asked only when the decision
    needs it (an indexed range of (run, status)): a settle after each of 10,000 pieces must not
    count all of them each time. Counts are cached for the settle's transaction."""

    def __init__(self, run_id: int) -> None:
        self.pieces = JobPiece.objects.filter(run_id=run_id, index__gte=0)
        self._found: dict[tuple[str, ...], int] = {}

    def count(self, *statuses: str) -> int:
        found = self._found.get(statuses)
        if found is None:
            found = self._found[statuses] = self.pieces.filter(status__in=statuses).count()
        return found

    def any_open(self) -> bool:
        key = ("open?",)
        if key not in self._found:
            self._found[key] = int(self.pieces.filter(status__in=OPEN_PIECE_STATUSES).exists())
        return bool(self._found[key])

    def forget(self) -> None:
        self._found.clear()


def _policy_met(run: JobRun, tally: _Tally) -> bool | None:
    """Whether the job's success policy is met (True), can no longer be (False), or not yet
    decided (None)."""
    job = run.job
    policy = PieceSuccess(job.pieces_success)
    if policy is PieceSuccess.AT_LEAST:
        need = job.pieces_success_count or run.piece_count
        succeeded = tally.count(PieceStatus.SUCCESS)
        if succeeded >= need:
            return True
        return False if succeeded + tally.count(*OPEN_PIECE_STATUSES) < need else None
    if policy is PieceSuccess.REQUIRED:
        required = {int(i) for i in job.pieces_required or ()}
        done = tally.pieces.filter(index__in=required, status=PieceStatus.SUCCESS).count()
        if done == len(required):
            return True
        ended = (PieceStatus.FAILED, PieceStatus.CANCELLED)  # for good: it can no longer be met
        if tally.pieces.filter(index__in=required, status__in=ended).exists():
            return False
        return None if tally.any_open() else False
    if tally.any_open():
        return None
    failed = tally.count(PieceStatus.FAILED)
    return failed <= job.max_failed_pieces and tally.count(PieceStatus.CANCELLED) == 0


def _counts(run_id: int) -> Counter[str]:
    """Every state's count among the run's pieces (one grouped count: for its close)."""
    rows = (
        JobPiece.objects.filter(run_id=run_id, index__gte=0)
        .values("status")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return Counter({str(row["status"]): int(row["n"]) for row in rows})


def _locking_run() -> Any:
    """Runs read under their row lock — only the run's row where the database can say so (a
    job's row locked by every settle would queue the scheduler's writes to it behind them)."""
    connection = connections[router.db_for_write(JobRun)]
    if connection.features.has_select_for_update_of:
        return JobRun.objects.select_for_update(of=("self",))
    return JobRun.objects.select_for_update()


def may_close(run_id: int) -> bool:
    """Whether a piece's success could change its run (one indexed look, no lock): never while
    another piece is open, for a job whose success policy is "all" and that holds no piece
    back. A piece that ends last sees every other end (each looks after its own is written),
    so it settles the run; the leader's sweep settles any run left open."""
    return not piece_statements.any_open(run_id)


def settle(run_id: int) -> Settled:
    """Decide what the run's pieces make of it, under its row lock (see the module): cancel the
    pieces not started once its fate is decided, close it when none is open, or release the
    next pieces its parallel cap allows."""
    with transaction.atomic():
        run = (
            _locking_run()
            .select_related("job")
            .filter(pk=run_id, status=RunStatus.RUNNING, piece_count__gt=0)
            .first()
        )
        if run is None:
            return Settled()
        job = run.job
        tally = _Tally(run_id)
        failed = tally.count(PieceStatus.FAILED)
        over = failed > job.max_failed_pieces
        met = None if over else _policy_met(run, tally)
        stopping = run.cancel_requested_at is not None
        cancelled = 0
        if over or stopping or met is not None:
            why = (
                "its run was cancelled"
                if stopping
                else f"its run failed: {failed} pieces failed"
                if over or met is False
                else "its run succeeded without it"
            )
            cancelled = cancel_pieces(run, why, by=run.cancel_requested_by or "its run's policy")
            tally.forget()
        if tally.any_open():
            if over or stopping or met is not None:
                return Settled(run=run, cancelled=cancelled)
            return Settled(send=release(run), run=run)
        if stopping:
            status = RunStatus.CANCELLED
        elif over or not (met or _policy_met(run, tally)):
            status = RunStatus.FAILED
        else:
            status = RunStatus.SUCCESS
        completion = close_run(run, status, _counts(run_id))
        if completion is None:
            return Settled(run=run, cancelled=cancelled)
        return Settled(closed=str(status), send=completion, run=run, cancelled=cancelled)


def progress(counts: Counter[str], total: int) -> str:
    """``37/64 done, 2 failed``: a run's pieces in words."""
    done = counts[PieceStatus.SUCCESS]
    text = f"{done}/{total} done"
    for status in (PieceStatus.FAILED, PieceStatus.CANCELLED):
        if counts[status]:
            text += f", {counts[status]} {status}"
    return text


def close_run(run: JobRun, status: str, counts: Counter[str]) -> list[JobPiece] | None:
    """``running`` → ``status`` for a run whose pieces are all ended: the one conditional UPDATE
    that closes it (none of its pieces open), and in the same transaction its completion
    message, if the job has one. None when it was not this call's to close; else the pieces to
    send (the completion message, or none)."""
    now = database_now()
    open_pieces = JobPiece.objects.filter(
        run_id=OuterRef("pk"), index__gte=0, status__in=OPEN_PIECE_STATUSES
    )
    failed = list(
        JobPiece.objects.filter(run_id=run.pk, status=PieceStatus.FAILED, index__gte=0)
        .order_by("index")
        .values("index", "key", "error")[:SUMMARY_FAILED]
    )
    fields: dict[str, Any] = {
        "status": RunStatus(status),
        "finished_at": now,
        "result": progress(counts, run.piece_count),
        "error": "; ".join(f"piece {f['index']}: {f['error']}" for f in failed)[:ERROR_LIMIT],
    }
    if run.started_at is not None:
        fields["duration"] = now - run.started_at
    closed = (
        JobRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING)
        .exclude(Exists(open_pieces))
        .update(**fields)
    )
    if not closed:
        return None
    for name, value in fields.items():
        setattr(run, name, value)
    if not run.job.on_complete:
        return []
    summary = {
        "run": run.pk,
        "job": run.job.name,
        "slot": run.scheduled_for.isoformat(),
        "status": str(status),
        "pieces": run.piece_count,
        "counts": {str(k): v for k, v in sorted(counts.items())},
        "failed": failed,
    }
    republish = _republish_at(now, 1)
    again = JobPiece.objects.filter(run_id=run.pk, index=COMPLETION).update(
        key=summary,
        status=PieceStatus.QUEUED,
        attempt=F("attempt") + 1,
        queued_at=now,
        publish_count=F("publish_count") + 1,
        republish_at=republish,
        claim_token="",
        finished_at=None,
        error="",
    )
    if not again:  # the first close (a run an operator re-opened closes again: attempt 2)
        JobPiece.objects.bulk_create(
            [
                JobPiece(
                    run_id=run.pk,
                    index=COMPLETION,
                    key=summary,
                    task_id=piece_task_id(run.task_id, COMPLETION),
                    status=PieceStatus.QUEUED,
                    queued_at=now,
                    publish_count=1,
                    republish_at=republish,
                )
            ]
        )
    completion = JobPiece.objects.get(run_id=run.pk, index=COMPLETION)
    return [completion]


def note_closed(run: JobRun, status: str) -> None:
    """What a run's end does once its pieces closed it: its job's failure count
    (``pause_after_failures``) and the run signals."""
    if status == RunStatus.SUCCESS:
        failures.note_success(run.job)
        signals.send(signals.run_succeeded, run, result=run.result)
    elif status == RunStatus.FAILED:
        signals.send(signals.run_failed, run, error=None)
        failures.note_failure(run.job)


def progress_of(run: JobRun) -> str:
    """A run's progress in words (one grouped count of its pieces), or "" for a run without
    pieces."""
    if not run.piece_count:
        return ""
    return progress(_counts(run.pk), run.piece_count)
