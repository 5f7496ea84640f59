"""Publish then mark: the one way runs go out, for the leader, the workers and the operators.

Runs are recorded first (their rows are the outbox), then their messages are published, then
the runs whose messages reached the broker are marked ``queued`` with their re-publish deadline.
A failure leaves the rest ``pending``: the leader's outbox sweep sends them later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..ledger.fence import Fence
from ..ledger.outbox import OutboxMessage, mark_published
from .port import Dispatcher, PublishFailed


@dataclass(frozen=True)
class Sent:
    """What one publish got out: the messages that reached the broker, and why the others did
    not (None when all did)."""

    messages: list[OutboxMessage]
    failure: BaseException | None = None


def publish(dispatcher: Dispatcher, messages: Sequence[OutboxMessage]) -> Sent:
    """Publish ``messages`` in order; a broker failure is returned, not raised."""
    if not messages:
        return Sent([])
    try:
        published = dispatcher.publish(messages)
        failure: BaseException | None = None
    except PublishFailed as exc:
        published, failure = exc.published, exc.cause
    ids = set(published)  # membership tests: a batch is hundreds of messages
    return Sent([m for m in messages if m.task_id in ids], failure)


def send_runs(
    dispatcher: Dispatcher,
    messages: Sequence[OutboxMessage],
    *,
    now: datetime,
    fence: Fence | None = None,
    node_id: str | None = None,
    not_before: datetime | None = None,
) -> Sent:
    """Publish ``messages`` and mark those that reached the broker published (see
    :func:`~django_cluster_cron.ledger.outbox.mark_published`: a leader's ``fence`` and
    ``node_id``; ``not_before``, when the run may not start earlier)."""
    sent = publish(dispatcher, messages)
    mark_published(sent.messages, now=now, fence=fence, node_id=node_id, not_before=not_before)
    return sent
