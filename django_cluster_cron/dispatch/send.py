"""The one way runs go out — for the leader, the workers and the operators' actions alike.

Runs are recorded first (their rows are the outbox); then, in two verbs:

* :func:`publish_now` — publish their messages, let the caller report what went (the leader's
  lateness and spans), record the runs that can never be sent ``failed``, and mark the runs
  whose messages reached the broker ``queued`` with their re-publish deadline;
* :func:`send_prepared` — at their instant, send the messages of runs recorded ahead (built by
  :func:`prepare`) and record the refused; the leader marks what went in one fenced statement
  per pass (:func:`mark_prepared_sent`).

Adapters write nothing in the ledger: this module does, from what they return. A broker
failure leaves the rest ``pending``: the leader's outbox sweep sends them later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError

from ..ledger import piece_moves, piece_runs, transitions
from ..ledger.fence import Fence
from ..ledger.outbox import OutboxMessage, mark_published, mark_sent, note_enqueued_ahead
from ..ledger.pieces import piece_message
from .port import Dispatcher, Done, Prepared, PublishFailed, Refusal, SendFailed

logger = logging.getLogger("django_cluster_cron.scheduler")


@dataclass(frozen=True)
class Sent:
    """What one publish got out: the messages that reached the broker, and why the others did
    not (None when all did)."""

    messages: list[OutboxMessage]
    failure: BaseException | None = None


def _refuse(refused: Sequence[Refusal]) -> None:
    """Runs whose message can never be sent: failed, with the reason."""
    for refusal in refused:
        logger.error(
            "run.unsendable run=%s task_id=%s error=%s",
            refusal.run_id,
            refusal.task_id,
            refusal.reason,
        )
        transitions.unrunnable(refusal.run_id, refusal.task_id, refusal.attempt, refusal.reason)


def publish_now(
    dispatcher: Dispatcher,
    messages: Sequence[OutboxMessage],
    *,
    now: datetime | Callable[[], datetime],
    fence: Fence | None = None,
    node_id: str | None = None,
    not_before: datetime | None = None,
    report: Callable[[Sent], None] | None = None,
) -> Sent:
    """Publish ``messages`` in order, then ``report`` what went (before anything is written),
    record the refused runs failed and mark those that reached the broker published (see
    :func:`~django_cluster_cron.ledger.outbox.mark_published`: a leader's ``fence`` and
    ``node_id``; ``not_before``, when the run may not start earlier; ``now``, the database's
    time of the send, or a clock read after the publish). A broker failure is returned, not
    raised."""
    if not messages:
        return Sent([])
    try:
        published = dispatcher.publish(messages)
        failure: BaseException | None = None
    except PublishFailed as exc:
        published, failure = exc.published, exc.cause
    ids = set(published)  # membership tests: a batch is hundreds of messages
    sent = Sent([m for m in messages if m.task_id in ids], failure)
    if report is not None:
        report(sent)
    _refuse(published.refused)
    at = now() if callable(now) else now
    mark_published(sent.messages, now=at, fence=fence, node_id=node_id, not_before=not_before)
    return sent


def send_pieces(dispatcher: Dispatcher, messages: Sequence[OutboxMessage]) -> Sent:
    """Publish the messages of pieces, which the ledger marked sent before they go
    (:mod:`~django_cluster_cron.ledger.pieces`: a sender that dies in between leaves them to
    the leader's sweep); a piece whose task can never be enqueued fails. A broker failure is
    returned, not raised (the sweep sends the rest)."""
    if not messages:
        return Sent([])
    try:
        published = dispatcher.publish(messages)
        failure: BaseException | None = None
    except PublishFailed as exc:
        published, failure = exc.published, exc.cause
    for refusal in published.refused:
        logger.error("piece.unsendable task_id=%s error=%s", refusal.task_id, refusal.reason)
        piece_moves.unrunnable_piece(refusal.task_id, refusal.attempt, refusal.reason)
    if failure is not None:
        logger.warning("pieces.publish_failed count=%s error=%s", len(messages), failure)
    ids = set(published)
    return Sent([m for m in messages if m.task_id in ids], failure)


def settle_pieces(dispatcher: Dispatcher, run_id: int) -> piece_runs.Settled:
    """Settle a run split into pieces (:func:`~django_cluster_cron.ledger.piece_runs.settle`:
    cancel, release, close), send the pieces that released and the completion message, and
    when it closed the run, do what a run's end does (the job's failure count, the signals)."""
    settled = piece_runs.settle(run_id)
    run = settled.run
    if run is None:
        return settled
    if settled.send:
        send_pieces(dispatcher, [piece_message(run, piece) for piece in settled.send])
    if settled.closed is not None:
        logger.info(
            "run.closed run=%s job=%s status=%s %s", run.pk, run.job_id, settled.closed, run.result
        )
        piece_runs.note_closed(run, settled.closed)
    return settled


def prepare(dispatcher: Dispatcher, messages: Sequence[OutboxMessage]) -> list[Prepared]:
    """Build the messages of runs recorded ahead, grouped by due time, and record on the runs
    the adapter enqueued ahead already that they are on their backend (a leader that takes
    them over does not enqueue them again)."""
    prepared = dispatcher.prepare(messages)
    if prepared.enqueued_ahead:
        try:
            note_enqueued_ahead(prepared.enqueued_ahead)
        except DatabaseError as exc:  # a leader that takes them over enqueues them again
            logger.warning(
                "runs.enqueued_ahead_not_noted count=%s error=%s",
                len(prepared.enqueued_ahead),
                exc,
            )
    return list(prepared)


def send_prepared(dispatcher: Dispatcher, groups: Sequence[Prepared], keep: set[int]) -> Done[int]:
    """Send the prepared messages whose run is in ``keep`` and record the refused; the runs
    sent. Raises :class:`SendFailed` (with the runs sent before) when the broker fails."""
    try:
        sent = dispatcher.send_prepared(groups, keep)
    except SendFailed as exc:
        _refuse(exc.sent.refused)
        raise
    _refuse(sent.refused)
    return sent


def mark_prepared_sent(
    sent: Sequence[tuple[list[int], datetime]], *, fence: Fence, node_id: str
) -> None:
    """Record prepared messages a leader sent (run ids with when they went) ``queued``: one
    fenced transaction (:func:`~django_cluster_cron.ledger.outbox.mark_sent`)."""
    mark_sent(sent, fence=fence, node_id=node_id)
