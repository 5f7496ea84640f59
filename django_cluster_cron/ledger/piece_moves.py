"""Every move of a piece.

A piece moves as a run does, each move one conditional UPDATE on the states it may leave:
``queued``/``retrying`` → ``running`` (:func:`claim_piece`: one delivery wins), ``running`` →
``success`` | ``failed`` | ``retrying`` | ``cancelled`` (:func:`finish_piece`, guarded on its
attempt), a silent worker's piece retried or failed by the leader (:func:`lost_pieces`), the
pieces not started cancelled when their run's fate is decided or its cancel asked for
(:func:`cancel_pieces`), failed ones sent again by an operator
(:func:`retry_pieces`, re-opening a failed run: :func:`reopen_run`). What the pieces make of
their run is :mod:`.piece_runs`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F

from ..dbtime import DbNow
from ..models import (
    CLAIMABLE_PIECE_STATUSES,
    JobPiece,
    JobRun,
    PieceStatus,
    RunStatus,
    WorkerLostPolicy,
)
from . import piece_statements
from .fence import Fence
from .pieces import _republish_at
from .transitions import ERROR_LIMIT, RESULT_LIMIT, TRACE_LIMIT

__all__ = [
    "cancel_pieces",
    "claim_piece",
    "finish_piece",
    "lost_pieces",
    "next_piece_attempt",
    "open_runs",
    "reopen_run",
    "retry_pieces",
    "unrunnable_piece",
]

NOT_STARTED = (PieceStatus.PENDING, PieceStatus.QUEUED, PieceStatus.RETRYING)


# -- a worker's moves of a piece -----------------------------------------------------------------


def claim_piece(
    run_id: int, index: int, task_id: str, attempt: int, worker: str, token: str, pool: str
) -> JobPiece | None:
    """Take the piece for this delivery if it is still claimable at this attempt (one delivery
    can win), while its run runs and is not asked to stop (a completion message: whatever its
    run's state); the piece with its run and job, or None. One conditional UPDATE, every
    condition on the piece's row (:mod:`.piece_statements`)."""
    return piece_statements.claim(run_id, index, task_id, attempt, worker, token, pool)


def finish_piece(piece: JobPiece, status: str, fields: dict[str, Any]) -> bool:
    """``running`` → ``status`` (success, failed, retrying or cancelled) with ``fields``, if the
    piece still runs at its attempt (a late finish after it was declared lost changes nothing);
    a retry's ``fields`` come from :func:`next_piece_attempt`. The instance takes them once
    written. An end (not a retry) is the compiled statement of :mod:`.piece_statements`."""
    fields = {**fields}
    for name, limit in (
        ("error", ERROR_LIMIT),
        ("traceback", TRACE_LIMIT),
        ("result", RESULT_LIMIT),
    ):
        if name in fields:
            fields[name] = fields[name][:limit]
    if status == PieceStatus.RETRYING:
        written = JobPiece.objects.filter(
            pk=piece.pk, attempt=piece.attempt, status=PieceStatus.RUNNING
        ).update(status=PieceStatus.RETRYING, finished_at=DbNow(), **fields)
    else:
        fields.setdefault("result", "")
        fields.setdefault("error", "")
        fields.setdefault("traceback", "")
        written = piece_statements.end(
            piece,
            status,
            duration=fields.get("duration") or timedelta(0),
            result=fields["result"],
            error=fields["error"],
            trace=fields["traceback"],
        )
    if written:
        piece.status = PieceStatus(status)
        for name, value in fields.items():
            setattr(piece, name, value)
    return bool(written)


def next_piece_attempt(piece: JobPiece, at: datetime) -> dict[str, Any]:
    """The fields of ``piece``'s next attempt, due at ``at``: sent at once, its re-publish time
    counted from ``at``."""
    return {
        "attempt": piece.attempt + 1,
        "retry_at": at,
        "publish_count": F("publish_count") + 1,
        "republish_at": _republish_at(at, 1),
        "claim_token": "",
    }


def cancel_pieces(run: JobRun, reason: str, *, by: str) -> int:
    """The pieces of ``run`` not started → ``cancelled``; the running ones are asked to stop
    (their body sees it at its next heartbeat). How many were cancelled."""
    pieces = JobPiece.objects.filter(run_id=run.pk, index__gte=0)
    cancelled = pieces.filter(status__in=NOT_STARTED).update(
        status=PieceStatus.CANCELLED,
        error=f"cancelled: {reason}"[:ERROR_LIMIT],
        finished_at=DbNow(),
    )
    pieces.filter(status=PieceStatus.RUNNING, cancel_requested_at__isnull=True).update(
        cancel_requested_at=DbNow(), cancel_requested_by=by[:255]
    )
    return int(cancelled)


def unrunnable_piece(task_id: str, attempt: int, error: str) -> bool:
    """A sent piece whose task cannot be enqueued (its backend refuses it) → ``failed``."""
    return bool(
        JobPiece.objects.filter(
            task_id=task_id, attempt=attempt, status__in=CLAIMABLE_PIECE_STATUSES
        ).update(status=PieceStatus.FAILED, error=error[:ERROR_LIMIT], finished_at=DbNow())
    )


def open_runs(limit: int = 100) -> list[int]:
    """Runs split into pieces and not closed: the leader's backstop settles them (a worker that
    died between a piece's end and its run's settle leaves one behind)."""
    runs = JobRun.objects.filter(status=RunStatus.RUNNING, piece_count__gt=0)
    return list(runs.order_by("pk").values_list("pk", flat=True)[:limit])


# -- the leader's and an operator's moves --------------------------------------------------------


def lost_pieces(
    *, now: datetime, lost_after: timedelta, fence: Fence, limit: int
) -> list[JobPiece]:
    """``running`` pieces whose worker stopped heartbeating ``lost_after`` ago → ``retrying``
    (the next attempt, sent at once) or ``failed``, per the job's ``on_worker_lost`` and retries
    (``cancelled`` when a stop was asked for); fenced. The pieces moved, with their run."""
    moved: list[JobPiece] = []
    with fence.transaction(now):
        silent = (
            JobPiece.objects.select_for_update()
            .select_related("run__job")
            .filter(status=PieceStatus.RUNNING, heartbeat_at__lt=now - lost_after)
            .order_by("heartbeat_at")[:limit]
        )
        for piece in silent:
            job = piece.run.job
            seen = piece.heartbeat_at or now
            reason = (
                f"worker lost: {piece.worker or 'its worker'} stopped heartbeating at "
                f"{seen:%Y-%m-%d %H:%M:%S}Z"
            )
            base = JobPiece.objects.filter(
                pk=piece.pk, attempt=piece.attempt, status=PieceStatus.RUNNING
            )
            if piece.cancel_requested_at is not None:
                base.update(status=PieceStatus.CANCELLED, error=reason, finished_at=now)
                piece.status = PieceStatus.CANCELLED
            elif job.on_worker_lost == WorkerLostPolicy.RETRY and piece.attempt <= job.max_retries:
                base.update(
                    status=PieceStatus.RETRYING, error=reason, **next_piece_attempt(piece, now)
                )
                piece.refresh_from_db()
            else:
                base.update(status=PieceStatus.FAILED, error=reason, finished_at=now)
                piece.status = PieceStatus.FAILED
            moved.append(piece)
    return moved


def retry_pieces(run: JobRun, indexes: list[int] | None = None) -> int:
    """An operator sends failed pieces of ``run`` again (``indexes``: those; None: every failed
    one): each ``failed`` → ``pending``, its next attempt; a run that failed is re-opened
    ``running`` by the same conditional update, and the pieces its failure cancelled before
    they started go again with them. How many pieces were re-opened; the caller settles the
    run, which sends them within its cap."""
    with transaction.atomic():
        locked = JobRun.objects.select_for_update().filter(pk=run.pk, piece_count__gt=0).first()
        if locked is None:
            return 0
        pieces = JobPiece.objects.filter(run_id=run.pk, index__gte=0)
        failed = pieces.filter(status=PieceStatus.FAILED)
        if indexes is not None:
            failed = failed.filter(index__in=indexes)
        chosen = list(failed.values_list("pk", flat=True))
        if not chosen:
            return 0
        if locked.status == RunStatus.FAILED:  # what its failure cancelled goes again too
            chosen += list(pieces.filter(status=PieceStatus.CANCELLED).values_list("pk", flat=True))
        reopened = JobPiece.objects.filter(pk__in=chosen).update(
            status=PieceStatus.PENDING,
            attempt=F("attempt") + 1,
            retry_at=None,
            republish_at=None,
            claim_token="",
            finished_at=None,
            cancel_requested_at=None,
            cancel_requested_by="",
        )
        reopen_run(locked)
    return int(reopened)


def reopen_run(run: JobRun) -> bool:
    """``failed`` or ``success`` → ``running``: a run with pieces whose failed pieces an
    operator sent again (a success may have had failures within ``max_failed_pieces``); its
    completion message goes again, its next attempt, when it closes anew."""
    reopened = JobRun.objects.filter(
        pk=run.pk, status__in=(RunStatus.FAILED, RunStatus.SUCCESS), piece_count__gt=0
    ).update(status=RunStatus.RUNNING, finished_at=None, duration=None, error="")
    if reopened:
        run.status = RunStatus.RUNNING
    return bool(reopened)
