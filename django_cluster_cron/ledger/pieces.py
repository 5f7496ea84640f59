"""A run split into pieces: recording them, sending them within the job's parallel cap, and the
messages they go as.

The worker that claims a run of a job with pieces records them (:func:`split`: one row per
piece, unique per (run, index), in the transaction that marks the run as split) instead of
running the body. A piece is sent by marking it ``queued`` with a re-publish deadline *before*
its message goes, so a sender that dies in between leaves it for the leader's sweep to send again
(:func:`stale`), never lost. Pieces beyond ``max_parallel_pieces`` wait ``pending`` until a piece
of the run ends (:func:`~.piece_moves.settle` releases the next ones).

Every piece's task id is derived from its run's: ``<run task id>.<index>`` (``.done`` for the
completion message), so a copy of a piece's message is told from a stranger exactly as a run's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, F, Q

from ..conf import app_settings
from ..dbtime import DbNow, database_now
from ..models import (
    COMPLETION,
    IN_FLIGHT_PIECE_STATUSES,
    JobPiece,
    JobRun,
    PieceStatus,
    RunStatus,
)
from .fence import Fence
from .outbox import REPUBLISH_BACKOFF_DOUBLINGS, OutboxMessage

__all__ = [
    "in_flight_by_job",
    "piece_message",
    "piece_task_id",
    "release",
    "split",
    "stale",
]

# Rows per INSERT when a run is split (10,000 pieces: ten statements).
INSERT_CHUNK = 1000


def piece_task_id(run_task_id: str, index: int) -> str:
    """The task id of piece ``index`` of the run whose task id is ``run_task_id``."""
    return f"{run_task_id}.done" if index == COMPLETION else f"{run_task_id}.{index}"


def piece_message(run: JobRun, piece: JobPiece) -> OutboxMessage:
    """The message of ``piece`` of ``run`` (whose job is loaded): the job's own task with its
    arguments — the completion message is the job's ``on_complete`` task with ``summary=`` —
    under the piece's own task id and attempt. No expiry: the run was taken in time."""
    job = run.job
    base = OutboxMessage.for_run(run)
    found = dataclasses.replace(
        base,
        task_id=piece.task_id,
        attempt=piece.attempt,
        publish_count=piece.publish_count,
        expires=None,
        eta=piece.retry_at if piece.status == PieceStatus.RETRYING else None,
        due_at=None,
        enqueued="",
        piece=piece.index,
    )
    if piece.index == COMPLETION:
        found = dataclasses.replace(
            found, task=job.on_complete, args=(), kwargs={"summary": piece.key}
        )
    return found


def _republish_at(now: datetime, sends: int) -> datetime:
    """When a piece sent for the ``sends``-th time is sent again if no worker took it."""
    base: timedelta = app_settings.OUTBOX_REPUBLISH_AFTER
    wait: timedelta = base * 2 ** min(max(sends - 1, 0), REPUBLISH_BACKOFF_DOUBLINGS)
    return now + wait


def split(run: JobRun, keys: Sequence[Any] | None, count: int) -> list[OutboxMessage] | None:
    """Record ``run``'s pieces (``count`` of them; with ``keys``, one per key) in the transaction
    that marks the run split — only if it still runs at its attempt under this claim — and
    return the messages of those to send now (up to ``max_parallel_pieces``). None when the run
    was no longer this claim's (declared lost meanwhile): nothing is recorded.

    The run keeps ``running``; it holds no heartbeat of its own from now on (its pieces do), so
    the leader never declares it lost."""
    job = run.job
    now = database_now()
    cap = job.max_parallel_pieces or count
    republish = _republish_at(now, 1)
    with transaction.atomic():
        mine = JobRun.objects.filter(
            pk=run.pk, attempt=run.attempt, status=RunStatus.RUNNING, piece_count=0
        )
        if getattr(run, "claim_token", ""):
            mine = mine.filter(claim_token=run.claim_token)
        if not mine.update(piece_count=count, heartbeat_at=None):
            return None
        rows = [
            JobPiece(
                run_id=run.pk,
                index=index,
                key=None if keys is None else keys[index],
                task_id=piece_task_id(run.task_id, index),
                status=PieceStatus.QUEUED if index < cap else PieceStatus.PENDING,
                queued_at=now if index < cap else None,
                publish_count=1 if index < cap else 0,
                republish_at=republish if index < cap else None,
            )
            for index in range(count)
        ]
        JobPiece.objects.bulk_create(rows, batch_size=INSERT_CHUNK, ignore_conflicts=True)
    run.piece_count, run.heartbeat_at = count, None
    sent = [piece for piece in rows if piece.status == PieceStatus.QUEUED]
    return [piece_message(run, piece) for piece in sent]


def release(run: JobRun) -> list[JobPiece]:
    """Mark the next waiting pieces of ``run`` ``queued``, as many as its parallel cap leaves
    room for, lowest index first; the caller holds the run's row lock and sends them after the
    commit. The pieces marked."""
    cap = run.job.max_parallel_pieces
    pieces = JobPiece.objects.filter(run_id=run.pk, index__gte=0)
    if cap is None:
        room = run.piece_count
    else:
        room = cap - pieces.filter(status__in=IN_FLIGHT_PIECE_STATUSES).count()
    if room <= 0:
        return []
    waiting = list(
        pieces.filter(status=PieceStatus.PENDING)
        .order_by("index")
        .values_list("pk", flat=True)[:room]
    )
    if not waiting:
        return []
    republish = _republish_at(database_now(), 1)
    JobPiece.objects.filter(pk__in=waiting, status=PieceStatus.PENDING).update(
        status=PieceStatus.QUEUED,
        queued_at=DbNow(),
        publish_count=F("publish_count") + 1,
        republish_at=republish,
    )
    return list(JobPiece.objects.filter(pk__in=waiting, status=PieceStatus.QUEUED))


def stale(*, now: datetime, fence: Fence, limit: int) -> list[OutboxMessage]:
    """Sent pieces no worker took by their ``republish_at`` (their message may be lost; a
    retrying one's next attempt, once due): marked sent once more, the wait doubled, and
    returned to be sent again (the leader's sweep, fenced)."""
    due = Q(status__in=(PieceStatus.QUEUED, PieceStatus.RETRYING), republish_at__lte=now)
    if not JobPiece.objects.filter(due).exists():  # the usual sweep: nothing
        return []
    with fence.transaction(now):
        found = list(
            JobPiece.objects.select_for_update()
            .select_related("run__job")
            .filter(due)
            .order_by("republish_at")[:limit]
        )
        for piece in found:
            piece.publish_count += 1
            piece.republish_at = _republish_at(now, piece.publish_count)
            JobPiece.objects.filter(pk=piece.pk, attempt=piece.attempt).update(
                publish_count=piece.publish_count, republish_at=piece.republish_at
            )
    return [piece_message(piece.run, piece) for piece in found]


def in_flight_by_job() -> dict[str, int]:
    """Pieces sent and not ended (queued, running, retrying), by job name: one grouped count."""
    rows = (
        JobPiece.objects.filter(status__in=IN_FLIGHT_PIECE_STATUSES, index__gte=0)
        .values("run__job__name")
        .annotate(count=Count("pk"))
        .order_by()
    )
    return {str(row["run__job__name"]): int(row["count"]) for row in rows}
