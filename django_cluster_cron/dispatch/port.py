"""The dispatch port: what the leader, the workers and the operators' actions need from an
execution system, whichever it is.

Two operations, and a third for runs recorded ahead:

* **publish** — send these runs' messages now, in order; say which reached the broker;
* **prepare** — build the messages of runs recorded ahead of their instant, grouped by due time,
  without sending anything;
* **send prepared** — at their instant, send the prepared messages whose runs are still to be
  sent.

An adapter decides what a message is (:mod:`django_cluster_cron.dispatch.celery`,
:mod:`django_cluster_cron.dispatch.djtasks`) and writes nothing in the ledger: it returns what
it sent, the runs it could never send (:class:`Refusal`: their task cannot be enqueued at all)
and the runs it enqueued ahead of their instant, and the one flow that sends
(:mod:`django_cluster_cron.dispatch.send`) writes those. The runs' rows are the outbox: a
message whose delivery is uncertain is reported as not sent, its run stays ``pending`` and the
leader sends it again; a copy that did arrive loses the worker's claim.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from ..ledger.outbox import OutboxMessage

T = TypeVar("T")


@dataclass(frozen=True)
class Refusal:
    """A run whose message can never be sent, whatever the broker's health (its task no longer
    names one the system has, its backend refuses its queue or priority): the flow records it
    failed with ``reason``."""

    run_id: int
    task_id: str
    attempt: int
    reason: str


class Done(list[T]):
    """What got out, in order (task ids of a publish, run ids of prepared messages), and
    ``refused``: the runs that can never be sent."""

    def __init__(self, done: Iterable[T] = (), refused: Iterable[Refusal] = ()) -> None:
        super().__init__(done)
        self.refused = list(refused)

    def extend_with(self, other: Done[T]) -> None:
        self.extend(other)
        self.refused += other.refused


class PartlyDone(Exception, Generic[T]):
    """A send that failed part-way: ``done`` lists what got through before ``cause`` (and the
    runs refused until then)."""

    failed = "sending failed after {n}"

    def __init__(self, done: Iterable[T], cause: BaseException) -> None:
        self.done: Done[T] = done if isinstance(done, Done) else Done(done)
        super().__init__(f"{self.failed.format(n=len(self.done))}: {cause}")
        self.cause = cause


class PublishFailed(PartlyDone[str]):
    """The broker refused or could not be reached; ``published`` lists the task ids that got
    through before it did."""

    failed = "publish failed after {n} messages"

    @property
    def published(self) -> Done[str]:
        return self.done


class SendFailed(PartlyDone[int]):
    """Sending prepared messages failed; ``sent`` lists the runs whose messages got through."""

    failed = "sending prepared messages failed after {n}"

    @property
    def sent(self) -> Done[int]:
        return self.done


def publish_runs(
    publish: Callable[[Sequence[OutboxMessage]], Done[str]],
    messages: Sequence[OutboxMessage],
    sent: Done[int],
) -> Done[int]:
    """Send prepared ``messages`` the ordinary way at their instant (an adapter's ``publish``):
    ``sent`` and the runs of the messages that got out. Raises :class:`SendFailed` with those
    when the publish fails."""
    by_task = {m.task_id: m.run_id for m in messages}
    try:
        published = publish(messages)
    except PublishFailed as exc:
        runs = Done([by_task[t] for t in exc.published], exc.published.refused)
        sent.extend_with(runs)
        raise SendFailed(sent, exc.cause) from exc
    sent.extend_with(Done([by_task[t] for t in published], published.refused))
    return sent


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


class Preparation(list[Prepared]):
    """The groups an adapter prepared, by due time, and ``enqueued_ahead``: the runs whose task
    it enqueued already, deferred to their due time (run id, the backend's result id)."""

    def __init__(
        self, groups: Iterable[Prepared] = (), enqueued_ahead: Iterable[tuple[int, str]] = ()
    ) -> None:
        super().__init__(groups)
        self.enqueued_ahead = list(enqueued_ahead)


class Dispatcher(Protocol):
    def publish(self, messages: Sequence[OutboxMessage]) -> Done[str]:
        """Send in order; return the task ids that reached the broker (and the runs refused).
        Raises :class:`PublishFailed` (with those sent before) at the first failure."""
        ...

    def prepare(self, messages: Sequence[OutboxMessage]) -> Preparation:
        """Build the messages of runs recorded ahead, grouped by due time; nothing is sent
        (except, on a backend that defers, the tasks enqueued ahead it reports)."""
        ...

    def send_prepared(self, groups: Sequence[Prepared], keep: set[int]) -> Done[int]:
        """Send the prepared messages whose run is in ``keep``; return the runs sent (and the
        runs refused). Raises :class:`SendFailed` (with those sent before) when the broker
        fails."""
        ...
