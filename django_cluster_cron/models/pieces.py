"""One slot split into pieces: the job's settings for it (:class:`JobPieces`, a base of
``JobDefinition``) and the piece rows under a run (:class:`JobPiece`).

A job with pieces keeps one run per slot — the row overlap, catch-up, pause and the outbox act
on. The worker that takes that run does not run the body: it records the run's pieces (a fixed
count, or the keys its planner returns) and sends them; each piece is then a message of the
job's own task, claimed, heartbeated, retried and recovered on its own, on whichever worker
takes it. The run's status follows from its pieces (:mod:`django_cluster_cron.ledger.pieces`).
"""

from __future__ import annotations

from typing import ClassVar

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from ..validation.pieces import MAX_PIECES

__all__ = [
    "CLAIMABLE_PIECE_STATUSES",
    "COMPLETION",
    "FINAL_PIECE_STATUSES",
    "IN_FLIGHT_PIECE_STATUSES",
    "MAX_PIECES",
    "OPEN_PIECE_STATUSES",
    "JobPiece",
    "JobPieces",
    "PieceStatus",
    "PieceSuccess",
]

# The index of a run's completion message (its ``on_complete`` task), beside its pieces.
COMPLETION = -1


class PieceSuccess(models.TextChoices):
    """When a run with pieces has succeeded (Kubernetes' success policy)."""

    ALL = "all", "all — every piece succeeded (failures within max failed pieces allowed)"
    AT_LEAST = "at_least", "at least — this many pieces succeeded"
    REQUIRED = "required", "required — these piece indexes succeeded"


class PieceStatus(models.TextChoices):
    """A piece's states (named as a run's): ``pending`` — held back by ``max_parallel_pieces``,
    not sent; ``queued`` — sent (again after its ``republish_at`` if no worker took it);
    ``running``; ``retrying`` — its next attempt is sent, due at ``retry_at``; then ``success``,
    ``failed`` or ``cancelled`` (not started when its run failed or was cancelled, or stopped by a
    cancel)."""

    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCESS = "success"
    FAILED = "failed"
    CANCELLED = "cancelled"


# A piece that still owes work (its run cannot close while one is open).
OPEN_PIECE_STATUSES = (
    PieceStatus.PENDING,
    PieceStatus.QUEUED,
    PieceStatus.RUNNING,
    PieceStatus.RETRYING,
)
# Sent and not ended: what ``max_parallel_pieces`` counts.
IN_FLIGHT_PIECE_STATUSES = (PieceStatus.QUEUED, PieceStatus.RUNNING, PieceStatus.RETRYING)
# What a delivery of a piece's message may claim.
CLAIMABLE_PIECE_STATUSES = (PieceStatus.QUEUED, PieceStatus.RETRYING)
FINAL_PIECE_STATUSES = (PieceStatus.SUCCESS, PieceStatus.FAILED, PieceStatus.CANCELLED)


class JobPieces(models.Model):
    """A job's pieces: how a slot is split, and when its run has succeeded."""

    pieces = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_PIECES)],
        help_text=f"Split every slot into this many pieces (1 to {MAX_PIECES:,}), each run by "
        "the job's task on any worker; the body reads current_run().piece. Empty: no pieces.",
    )
    pieces_planner = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="Or decide the pieces at the slot: a task (named as the job's task is) called "
        "without arguments on the worker that takes the run, returning a list of JSON keys "
        "(one piece per key).",
    )
    max_failed_pieces = models.PositiveIntegerField(
        default=0,
        db_default=0,
        validators=[MaxValueValidator(MAX_PIECES)],
        help_text="Failed pieces (retries spent) the run tolerates; one more fails the run and "
        "cancels the pieces not started.",
    )
    max_parallel_pieces = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_PIECES)],
        help_text="Pieces of one run sent at a time (empty: all at once).",
    )
    pieces_success = models.CharField(
        max_length=8,
        choices=PieceSuccess.choices,
        default=PieceSuccess.ALL,
        db_default=str(PieceSuccess.ALL),
        verbose_name="success policy",
    )
    pieces_success_count = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_PIECES)],
        help_text="For 'at least': how many pieces must succeed.",
    )
    pieces_required = models.JSONField(
        default=list,
        blank=True,
        help_text="For 'required': the JSON list of piece indexes (from 0) that must succeed.",
    )
    on_complete = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="A task sent once when a run with pieces ends, with summary= its outcome "
        "(counts by state, the failed pieces' keys and errors).",
    )

    class Meta:
        abstract = True

    @property
    def has_pieces(self) -> bool:
        return bool(self.pieces) or bool(self.pieces_planner)


class JobPiece(models.Model):
    """One piece of a run: sent, claimed, heartbeated, retried and recovered like a run, under
    it; at most one per (run, index). Index ``-1`` is the run's completion message."""

    run = models.ForeignKey("JobRun", on_delete=models.CASCADE, related_name="pieces")
    index = models.IntegerField(help_text="From 0; -1 is the run's completion message.")
    key = models.JSONField(
        null=True, blank=True, help_text="The planner's key (the completion's summary)."
    )
    status = models.CharField(
        max_length=16, choices=PieceStatus.choices, default=PieceStatus.PENDING
    )
    task_id = models.CharField(max_length=255, unique=True)
    attempt = models.PositiveIntegerField(default=1)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration = models.DurationField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)
    publish_count = models.PositiveIntegerField(default=0)
    republish_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=255, blank=True)
    worker_pool = models.CharField(max_length=32, blank=True, default="")
    claim_token = models.CharField(max_length=32, blank=True, default="", editable=False)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_by = models.CharField(max_length=255, blank=True, default="")
    result = models.TextField(blank=True)
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "piece"
        ordering: ClassVar = ["run", "index"]
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["run", "index"], name="cluster_cron_piece_one_per_index"
            )
        ]
        indexes: ClassVar = [
            # The leader's sweeps: silent running pieces, messages to send again.
            models.Index(fields=["status", "heartbeat_at"], name="cluster_cron_piece_beat"),
            models.Index(fields=["status", "republish_at"], name="cluster_cron_piece_resend"),
            # A run's pieces by state, in index order (its progress, what to send next, the
            # closing update: every count a settle asks is a range of it).
            models.Index(fields=["run", "status", "index"], name="cluster_cron_piece_run_status"),
        ]

    def __str__(self) -> str:
        which = "completion" if self.index == COMPLETION else f"piece {self.index}"
        return f"{which} of run {self.run_id} ({self.status})"
