"""Whether a job's pieces make sense: a count or a planner (not both), a success policy its
pieces can meet, a failed-piece cap below the count, a completion task of the job's own
execution system, and the overlap settings a run with pieces can honour."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from ..djtasks_app import resolve_task
from .jsontypes import json_type
from .task import clean_task_name

__all__ = ["piece_errors"]

ALL, AT_LEAST, REQUIRED = "all", "at_least", "required"
# The most pieces one slot may have (a fixed count, or a planner's keys).
MAX_PIECES = 10_000


def piece_errors(job: Any) -> dict[str, list[ValidationError]]:
    """Every error of ``job``'s piece settings, by field."""
    errors: dict[str, list[ValidationError]] = {}

    def refuse(field: str, message: str, code: str = "invalid_pieces") -> None:
        errors.setdefault(field, []).append(ValidationError(message, code=code))

    required = job.pieces_required
    if not isinstance(required, list):
        shown = "null" if required is None else f"a JSON {json_type(required)}"
        refuse("pieces_required", f"Give a JSON list of piece indexes, e.g. [0, 3], not {shown}.")
    else:
        wrong = [i for i in required if isinstance(i, bool) or not isinstance(i, int) or i < 0]
        if wrong:
            refuse(
                "pieces_required",
                f"Piece indexes are whole numbers from 0; got a JSON {json_type(wrong[0])}"
                + (f" ({wrong[0]})" if isinstance(wrong[0], int) else "")
                + ".",
            )
    count = job.pieces if isinstance(job.pieces, int) else None
    planner = job.pieces_planner or ""
    if count and planner:
        refuse("pieces_planner", "Give a number of pieces or a planner, not both.")
    elif planner:
        try:
            clean_task_name(planner)  # a task of the project, allowed like the job's own
        except ValidationError as exc:
            for message in exc.messages:
                refuse("pieces_planner", message, "invalid_task")
    split = bool(count or planner)
    policy = job.pieces_success or ALL
    if not split:
        for field, set_ in (
            ("max_failed_pieces", bool(job.max_failed_pieces)),
            ("max_parallel_pieces", job.max_parallel_pieces is not None),
            ("pieces_success", policy != ALL),
            ("on_complete", bool(job.on_complete)),
            ("pieces_success_count", job.pieces_success_count is not None),
            ("pieces_required", isinstance(required, list) and bool(required)),
        ):
            if set_:
                refuse(field, "Only a job with pieces uses this: set pieces or a planner.")
        return errors
    failed = job.max_failed_pieces
    if count and isinstance(failed, int) and failed >= count:
        refuse(
            "max_failed_pieces",
            f"With {count} pieces, at most {count - 1} may be allowed to fail "
            f"(got {failed}): a run must be able to fail.",
        )
    _success_errors(job, policy, count, refuse)
    if job.on_complete:
        _completion_errors(job, refuse)
    if job.overlap_policy == "terminate_other":
        refuse(
            "overlap_policy",
            "A run with pieces cannot be terminated (its pieces run on many workers): use "
            "cancel_other, which cancels the pieces not started and asks the running ones to "
            "stop.",
            "cannot_terminate",
        )
    if job.cancel_grace is not None:
        refuse(
            "cancel_grace",
            "A run with pieces cannot be terminated after a grace: leave it empty (a cancel "
            "asks its running pieces to stop and cancels the rest).",
            "cannot_terminate",
        )
    return errors


def _success_errors(job: Any, policy: str, count: int | None, refuse: Any) -> None:
    at_least, required = job.pieces_success_count, job.pieces_required
    if policy == AT_LEAST:
        if not at_least:
            refuse("pieces_success_count", "'At least' needs how many pieces must succeed.")
        elif count and at_least > count:
            refuse(
                "pieces_success_count",
                f"{at_least} pieces cannot succeed out of {count}.",
            )
    elif at_least is not None:
        refuse("pieces_success_count", "Only the 'at least' success policy uses a count.")
    if policy == REQUIRED:
        if not isinstance(required, list):
            return  # refused above
        if not required:
            refuse("pieces_required", "'Required' needs a JSON list of piece indexes, e.g. [0, 3].")
            return
        if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in required):
            return  # refused above
        if len(required) > MAX_PIECES:
            refuse("pieces_required", f"At most {MAX_PIECES:,} indexes (there are no more pieces).")
        elif count and max(required) >= count:
            refuse(
                "pieces_required",
                f"Index {max(required)} is not a piece: the pieces are 0 to {count - 1}.",
            )
        elif len(set(required)) != len(required):
            twice = next(i for i in required if required.count(i) > 1)
            refuse("pieces_required", f"Each index once: {twice} is given twice.")
    elif isinstance(required, list) and required:
        refuse("pieces_required", "Only the 'required' success policy uses indexes.")


def _completion_errors(job: Any, refuse: Any) -> None:
    try:
        clean_task_name(job.on_complete)
    except ValidationError as exc:
        for message in exc.messages:
            refuse("on_complete", message, "invalid_task")
        return
    if job.task and (resolve_task(job.task) is None) != (resolve_task(job.on_complete) is None):
        refuse(
            "on_complete",
            "The completion task must belong to the job's own execution system (both Celery "
            "tasks, or both django.tasks tasks).",
        )
