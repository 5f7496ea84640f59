"""The dispatch port: what the leader, the workers and the operators' actions need from an
execution system, whichever it is.

Two operations, and a third for runs recorded ahead:

* **publish** — send these runs' messages now, in order; say which reached the broker;
* **prepare** — build the messages of runs recorded ahead of their instant, grouped by due time,
  without sending anything;
* **send prepared** — at their instant, send the prepared messages whose runs are still to be
  sent.

An adapter decides what a message is (today: :mod:`django_cluster_cron.dispatch.celery`). Its
runs' rows are the outbox: a message whose delivery is uncertain is reported as not sent, its run
stays ``pending`` and the leader sends it again; a copy that did arrive loses the worker's claim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from ..ledger.outbox import OutboxMessage

T = TypeVar("T")


class PartlyDone(Exception, Generic[T]):
    """A send that failed part-way: ``done`` lists what got through before ``cause``."""

    failed = "sending failed after {n}"

    def __init__(self, done: list[T], cause: BaseException) -> None:
        super().__init__(f"{self.failed.format(n=len(done))}: {cause}")
        self.done = done
        self.cause = cause


class PublishFailed(PartlyDone[str]):
    """The broker refused or could not be reached; ``published`` lists the task ids that got
    through before it did."""

    failed = "publish failed after {n} messages"

    @property
    def published(self) -> list[str]:
        return self.done


class SendFailed(PartlyDone[int]):
    """Sending prepared messages failed; ``sent`` lists the runs whose messages got through."""

    failed = "sending prepared messages failed after {n}"

    @property
    def sent(self) -> list[int]:
        return self.done


def publish_runs(
    publish: Callable[[Sequence[OutboxMessage]], list[str]],
    messages: Sequence[OutboxMessage],
    sent: list[int],
) -> list[int]:
    """Send prepared ``messages`` the ordinary way at their instant (an adapter's ``publish``):
    ``sent`` and the runs of the messages that got out. Raises :class:`SendFailed` with those
    when the publish fails."""
    by_task = {m.task_id: m.run_id for m in messages}
    try:
        published = publish(messages)
    except PublishFailed as exc:
        raise SendFailed(sent + [by_task[t] for t in exc.published], exc.cause) from exc
    return sent + [by_task[t] for t in published]


class Prepared(Protocol):
    """Messages of runs due at one instant, built ahead (what the leader keeps until then)."""

    due: datetime

    def __len__(self) -> int: ...

    @property
    def run_ids(self) -> Sequence[int]: ...

    @property
    def job_ids(self) -> Sequence[int]: ...

    def slot(self, index: int) -> datetime: ...

    def task_id(self, index: int) -> str: ...

    def unpack(self) -> None:
        """Make the messages ready to go out (just before their instant)."""
        ...

    def drop_payloads(self) -> None:
        """Forget the messages once sent; run ids and slots stay (for the log lines)."""
        ...


class Dispatcher(Protocol):
    def publish(self, messages: Sequence[OutboxMessage]) -> list[str]:
        """Send in order; return the task ids that reached the broker. Raises
        :class:`PublishFailed` (with those sent before) at the first failure."""
        ...

    def prepare(self, messages: Sequence[OutboxMessage]) -> Sequence[Prepared]:
        """Build the messages of runs recorded ahead, grouped by due time; nothing is sent."""
        ...

    def send_prepared(self, groups: Sequence[Prepared], keep: set[int]) -> list[int]:
        """Send the prepared messages whose run is in ``keep``; return the runs sent. Raises
        :class:`SendFailed` (with those sent before) when the broker fails."""
        ...
