"""A run split into pieces, on a worker: the split, and one piece taken, carried out, recorded.

* **The split** — the worker that claims a run of a job with pieces does not run the body: it
  asks the job's planner for the keys (if it has one; run here, under the run's heartbeat),
  records the pieces (:func:`django_cluster_cron.ledger.pieces.split`) and sends the first of
  them (:func:`split_run`).
* **A piece** — its message is the job's own task, with headers (or keyword arguments) naming
  the run and the piece. It goes as a run does: the claim (one delivery wins), the body with
  ``current_run()`` the run and ``current_run().piece`` this piece, its row heartbeated, the
  ending written on the piece (:func:`carry_out_piece`) — a failure retried as the piece's next
  attempt while the job's retries last — then the run settled from its pieces: the next pieces
  released, or the run closed and its completion message sent
  (:func:`django_cluster_cron.ledger.piece_moves.settle`).
* **The completion message** (index -1) runs the job's ``on_complete`` task with the run's
  summary; its ending changes nothing of the run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from django.utils import timezone

from ..celery_app import get_celery_app
from ..core.retry import retry_delay
from ..dispatch import send_pieces, settle_pieces
from ..djtasks_app import resolve_task
from ..ledger import piece_moves
from ..ledger.piece_runs import may_close
from ..ledger.pieces import piece_message, split
from ..models import COMPLETION, MAX_PIECES, JobPiece, JobRun, PieceInfo, PieceStatus, RunCancelled
from ..ops import metrics
from ..wire import RunRef
from .claim import (
    count_duplicate,
    new_token,
    through_switchover,
    with_fresh_connection,
    worker_name,
)
from .current import running_as
from .heartbeat import call_beating
from .outcome import Delivery, Ending, Outcome, RunTimer, failure
from .overlap import release_next
from .record import error_text, short_result

logger = logging.getLogger("django_cluster_cron.worker")

__all__ = ["carry_out_piece", "split_run", "take_piece"]


class PlannerError(ValueError):
    """The planner's answer is no list of pieces."""


def _keys(found: Any) -> list[Any]:
    """The planner's answer as piece keys (a list of JSON values, 1 to MAX_PIECES)."""
    if isinstance(found, (str, bytes, dict)) or not isinstance(found, Sequence):
        raise PlannerError(f"the planner returned a {type(found).__name__}, not a list of keys")
    keys = list(found)
    if not keys:
        raise PlannerError("the planner returned no keys: a run needs at least one piece")
    if len(keys) > MAX_PIECES:
        raise PlannerError(f"the planner returned {len(keys):,} keys; at most {MAX_PIECES:,}")
    try:
        json.dumps(keys)
    except (TypeError, ValueError) as exc:
        raise PlannerError(f"the planner's keys are not JSON: {exc}") from None
    return keys


def _task(name: str) -> Callable[[], Any]:
    """A call of the task ``name`` in this process, without arguments: a ``django.tasks``
    task's function, or the Celery app's task (a direct call: no message, no wrapper)."""
    found = resolve_task(name)
    if found is not None:
        call: Callable[[], Any] = found.call
        return call
    task = get_celery_app().tasks.get(name)
    if task is None:
        raise LookupError(f"task {name!r} is not registered on worker {worker_name()}")
    return lambda: task()


def split_run(delivery: Delivery, run: JobRun) -> Outcome:
    """Split a claimed run into its pieces and send the first of them; the outcome (a failing
    planner fails the run, retried by the job's policy like a body)."""
    job = run.job
    keys: list[Any] | None = None
    if job.pieces_planner:
        try:
            planner = _task(job.pieces_planner)
            keys = _keys(call_beating(run, planner, interrupts=job.cancel_interrupts))
        except RunCancelled as exc:
            return failure(exc, Ending.CANCELLED)
        except Exception as exc:
            return failure(exc)
    count = len(keys) if keys is not None else int(job.pieces or 0)
    splitting = time.perf_counter()
    messages = with_fresh_connection(lambda: split(run, keys, count))
    if messages is None:
        return Outcome(Ending.SPLIT, reason="declared lost before its split")
    logger.info(
        "run.pieces_recorded run=%s pieces=%s sending=%s seconds=%.3f",
        run.pk,
        count,
        len(messages),
        time.perf_counter() - splitting,
    )
    send_pieces(delivery.dispatcher(), messages)
    return Outcome(Ending.SPLIT, result={"pieces": count})


# -- one piece ------------------------------------------------------------------------------------


def take_piece(ref: RunRef, index: int, pool: str = "") -> JobPiece | None:
    """Claim piece ``index`` of the run for this delivery; None (logged and counted) if another
    copy has it, or it no longer waits."""
    token = new_token()
    piece = through_switchover(
        lambda _retried: piece_moves.claim_piece(
            ref.run_id, index, ref.task_id, ref.attempt, worker_name(), token, pool
        )
    )
    if piece is None:
        count_duplicate(ref.run_id, ref.task_id)
        return None
    metrics.get().run_outcome("claimed").inc()
    return piece


def carry_out_piece(
    delivery: Delivery, piece: JobPiece, call: Callable[[], Any]
) -> tuple[Outcome, str | None]:
    """Run a claimed piece's body (``call``) with ``current_run().piece`` set, record how it
    ended, settle its run; the outcome and the piece's status written (None: not this
    attempt's any more)."""
    run = piece.run
    run.piece = PieceInfo(piece.index, piece.key, run.piece_count, piece.attempt)
    timer = RunTimer(piece.started_at or timezone.now())
    problem = run.job.runtime_problem()
    if problem is not None:
        outcome = Outcome(Ending.FINAL, reason=f"invalid job definition: {problem}")
    else:
        try:
            with running_as(run):
                result = call_beating(run, call, interrupts=run.job.cancel_interrupts, piece=piece)
            outcome = Outcome(Ending.SUCCESS, result=result)
        except RunCancelled as exc:
            outcome = failure(exc, Ending.CANCELLED)
        except Exception as exc:
            outcome = delivery.judge(exc) or failure(exc)
    status = with_fresh_connection(lambda: _record_piece(delivery, piece, timer, outcome))
    if status is not None and status != PieceStatus.RETRYING and piece.index != COMPLETION:
        job = run.job
        plain = job.pieces_success == "all" and job.max_parallel_pieces is None
        if status != PieceStatus.SUCCESS or not plain or may_close(run.pk):
            _settle(delivery, run)
    return outcome, status


def _record_piece(
    delivery: Delivery, piece: JobPiece, timer: RunTimer, outcome: Outcome
) -> str | None:
    run, job = piece.run, piece.run.job
    ending = outcome.ending
    duration = timer.elapsed()
    if run.cancel_requested_at is not None and ending is not Ending.SUCCESS:
        ending = Ending.CANCELLED
    if ending is Ending.FAILURE and piece.attempt > job.max_retries:
        ending = Ending.FINAL
    fields: dict[str, Any] = {"duration": duration}
    if ending is Ending.SUCCESS or ending is Ending.SKIPPED:
        status = PieceStatus.SUCCESS
        fields["result"] = (
            short_result(outcome.result)
            if ending is Ending.SUCCESS
            else f"not run: {outcome.reason}"
        )
        fields["error"] = ""
    elif ending is Ending.CANCELLED:
        status = PieceStatus.CANCELLED
        fields["error"] = f"cancelled: {error_text(outcome)}"
    elif ending is Ending.FAILURE:
        delay = retry_delay(piece.attempt, base=job.retry_backoff, cap=job.retry_backoff_max)
        status = PieceStatus.RETRYING
        fields.update(piece_moves.next_piece_attempt(piece, timer.now() + timedelta(seconds=delay)))
        fields.update(error=error_text(outcome), traceback=outcome.trace)
    else:
        status = PieceStatus.FAILED
        fields.update(error=error_text(outcome), traceback=outcome.trace)
    if not piece_moves.finish_piece(piece, status, fields):
        logger.warning("piece.finished_late run=%s piece=%s", run.pk, piece.index)
        return None
    logger.info(
        "piece.%s run=%s piece=%s attempt=%s",
        status,
        run.pk,
        piece.index,
        piece.attempt - (1 if status == PieceStatus.RETRYING else 0),
    )
    if piece.index != COMPLETION:
        metrics.get().piece_outcome(job.name, PIECE_OUTCOMES[status])
    if status == PieceStatus.RETRYING:
        piece.refresh_from_db()
        message = piece_message(run, piece)
        sent = send_pieces(delivery.dispatcher(), [message])
        if sent.failure is not None:  # the leader's sweep sends it once its time has passed
            logger.error("piece.retry_publish_failed run=%s piece=%s", run.pk, piece.index)
    return str(status)


def _settle(delivery: Delivery, run: JobRun) -> None:
    """After a piece ended: settle its run (what that released is sent), and when that closed
    the run, count it and release what its job's overlap policy held back behind it."""
    try:
        settled = with_fresh_connection(lambda: settle_pieces(delivery.dispatcher(), run.pk))
    except Exception as exc:  # the leader's sweep settles it
        logger.warning("run.settle_failed run=%s error=%s", run.pk, exc)
        return
    found = metrics.get()
    found.piece_outcome(run.job.name, "cancelled", settled.cancelled)
    if settled.closed is not None and settled.run is not None:
        found.run_outcome(CLOSED_OUTCOMES.get(settled.closed, "cancelled")).inc()
        release_next(delivery, settled.run, settled.closed, timezone.now())


# What the metrics call a piece's end (or its next attempt).
PIECE_OUTCOMES = {
    PieceStatus.SUCCESS: "succeeded",
    PieceStatus.FAILED: "failed",
    PieceStatus.RETRYING: "retried",
    PieceStatus.CANCELLED: "cancelled",
}
# What the metrics call a run's end when its pieces close it.
CLOSED_OUTCOMES = {"success": "succeeded", "failed": "failed", "cancelled": "cancelled"}
