"""Messages built before they are due, sent at the instant (runs recorded ahead).

The leader records the runs of slots due within its look-ahead before their time and builds
their messages then, so that when thousands of jobs share an instant (everyone schedules at the
top of the hour) all that is left at that instant is to hand finished messages to the broker.

On kombu's Redis transport (kombu >= 5.7, whose producers can batch) a message is built exactly
as :class:`~django_cluster_cron.dispatch.celery.sender.BatchSender` sends it — Celery's message
builder and sender, its signals, kombu's routing and serialization — except that the final Redis
command is collected instead of run: kombu hands it to a publish batch, and during preparation
the batch is ours. Each message must come out as one ``LPUSH`` of its payload onto its queue's
key; anything else (a fanout exchange, a queue with ``x-expires``) and that group keeps its
messages to publish the ordinary way at the instant. While messages are prepared the channel
reaches Redis through a client that refuses every command that delivers a message (declaring a
queue, which writes its binding, goes through): should a kombu release ever send a message
directly instead of handing it to the batch, preparing fails loudly instead of publishing
early. Prepared payloads are kept zlib-compressed, about 60 bytes a message instead of 1.2 KB:
the look-ahead's memory is bounded by its run budget, and small.

At the instant the payloads of all due groups go out in a pipeline of multi-value ``LPUSH``
commands (one per queue and :data:`PUSH_SIZE` messages): about 40 ms for 10,000 messages here,
where building and sending them then took 600 ms. Other transports (AMQP) keep the messages and
publish them at the instant through the ordinary path: the rows are recorded ahead, the
messages are not built ahead.

Celery's ``before_task_publish``/``after_task_publish`` fire when a message is prepared, up to
the look-ahead before it reaches the broker.
"""

from __future__ import annotations

import logging
import zlib
from array import array
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from celery import Celery

from ...core.slots import task_id_for
from ...ledger.outbox import OutboxMessage
from ..port import SendFailed
from .sender import BatchSender

logger = logging.getLogger("django_cluster_cron.scheduler")

# Messages per prepared chunk (compressed together) and per LPUSH at the instant.
CHUNK_SIZE = 500
PUSH_SIZE = 1000
# Commands per pipeline round trip at the instant (each pushes up to PUSH_SIZE messages).
PIPELINE_COMMANDS = 2
# Redis commands that deliver a message: refused while messages are prepared.
_DELIVERIES = frozenset({"LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "PUBLISH", "SPUBLISH"})


class WouldSend(RuntimeError):
    """kombu tried to write to Redis while a message was being prepared (not sent: refused)."""


@dataclass
class PreparedGroup:
    """Messages of runs due at one instant, built ahead.

    ``payload`` holds the fast form (Redis): the queue keys, each message's key index, the
    zlib-compressed concatenation of the payloads and where each ends, built in the message
    form ``own_task`` says (:mod:`.forms`); ``messages`` the ordinary form (published the usual
    way at the instant).
    """

    due: datetime
    run_ids: array[int] = field(default_factory=lambda: array("q"))
    job_ids: array[int] = field(default_factory=lambda: array("q"))
    slots: array[float] = field(default_factory=lambda: array("d"))  # UTC timestamps
    keys: list[str] = field(default_factory=list)
    key_of: bytearray = field(default_factory=bytearray)
    blob: bytes = b""
    ends: array[int] = field(default_factory=lambda: array("I"))
    messages: list[OutboxMessage] | None = None
    own_task: bool = True
    _unpacked: list[tuple[int, str, bytes]] | None = None

    def __len__(self) -> int:
        return len(self.run_ids)

    def slot(self, index: int) -> datetime:
        return datetime.fromtimestamp(self.slots[index], timezone.utc)

    def task_id(self, index: int) -> str:
        return task_id_for(self.job_ids[index], self.slot(index))

    def payloads(self) -> list[tuple[int, str, bytes]]:
        """``(run id, queue key, payload)`` of each message in the fast form."""
        if self._unpacked is not None:
            return self._unpacked
        data = zlib.decompress(self.blob)
        found = []
        start = 0
        for index, end in enumerate(self.ends):
            found.append((self.run_ids[index], self.keys[self.key_of[index]], data[start:end]))
            start = end
        return found

    def unpack(self) -> None:
        """Decompress now, ahead of the instant (the leader does it just before)."""
        if self.messages is None and self._unpacked is None:
            self._unpacked = self.payloads()

    def drop_payloads(self) -> None:
        """Forget the messages once sent; the run ids and slots stay (for the log lines)."""
        self._unpacked, self.blob, self.messages = None, b"", None
        self.ends, self.key_of = array("I"), bytearray()


class _NoDelivery:
    """The Redis client (or pipeline) a channel gets while messages are prepared: declaring a
    queue or reading an exchange's bindings goes through; a command that would deliver a
    message (LPUSH, RPUSH, PUBLISH) raises :class:`WouldSend` instead of reaching Redis."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        if name.upper() in _DELIVERIES:
            raise WouldSend(f"kombu called Redis {name!r} while a message was being prepared")
        attr = getattr(self._target, name)
        if name == "pipeline":
            return lambda *args, **kwargs: _NoDelivery(attr(*args, **kwargs))
        if name == "execute":
            return self._execute
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            return self if result is self._target else result  # a pipeline's chaining

        return call

    def _execute(self, *args: Any, **kwargs: Any) -> Any:
        stack = getattr(self._target, "command_stack", [])
        if any(str(command[0][0]).upper() in _DELIVERIES for command in stack):
            self._target.reset()
            raise WouldSend("kombu queued a delivery in a pipeline while a message was prepared")
        return self._target.execute(*args, **kwargs)

    def __enter__(self) -> _NoDelivery:
        self._target.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._target.__exit__(*exc)


class _Collector:
    """Stands in for kombu's publish batch while messages are prepared: kombu's producer hands
    it each message (``publish``), the Redis channel hands it the final commands (``add``)."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, tuple[Any, ...]]] = []

    def publish(self, channel: Any, message: Any, **kwargs: Any) -> Any:
        return channel.basic_publish(message, _publish_batch=self, **kwargs)

    def add(self, name: str, *args: Any) -> None:
        self.commands.append((name, args))


def can_prepare(producer: Any) -> bool:
    """Whether this producer's transport collects final commands (kombu >= 5.7, Redis)."""
    channel = producer.channel
    return (
        hasattr(producer, "_batch_local")
        and callable(getattr(channel, "create_publish_batch", None))
        and bool(getattr(channel, "supports_batch_publish", False))
        and callable(getattr(channel, "conn_or_acquire", None))
    )


@contextmanager
def _collecting(producer: Any) -> Iterator[_Collector]:
    channel = producer.channel
    collector = _Collector()
    own = channel.__dict__.get("conn_or_acquire")
    real = channel.conn_or_acquire

    @contextmanager
    def no_delivery(client: Any = None) -> Iterator[_NoDelivery]:
        with real(client) as found:
            yield _NoDelivery(found)

    channel.conn_or_acquire = no_delivery
    producer._batch_local.current = collector
    try:
        yield collector
    finally:
        del producer._batch_local.current
        if own is None:
            del channel.conn_or_acquire
        else:  # pragma: no cover - kombu sets no instance attribute of that name
            channel.conn_or_acquire = own


# Set once preparing was found unusable, so that is logged once per process.
_unavailable: list[str] = []


def prepare(
    app: Celery, messages: Sequence[OutboxMessage], *, fast: bool, own_task: bool = True
) -> list[PreparedGroup]:
    """Build the messages of runs recorded ahead, grouped by due time (chunks of CHUNK_SIZE).

    Never raises for the broker: if it cannot be reached now, the groups keep their messages
    for the ordinary publish at the instant (which reports the broker and leaves the runs to
    the outbox if it is still down then).
    """
    ordered = sorted(messages, key=lambda m: (m.due, m.run_id))
    chunks: list[list[OutboxMessage]] = []
    for message in ordered:
        if chunks and chunks[-1][0].due == message.due and len(chunks[-1]) < CHUNK_SIZE:
            chunks[-1].append(message)
        else:
            chunks.append([message])
    groups: list[PreparedGroup] = []
    for chunk in chunks:
        group = PreparedGroup(due=chunk[0].due, messages=chunk)
        for message in chunk:
            group.run_ids.append(message.run_id)
            group.job_ids.append(message.job_id)
            group.slots.append(message.scheduled_for.timestamp())
        groups.append(group)
    if not groups or not fast or _unavailable:
        return groups
    try:
        with app.producer_or_acquire() as producer:
            if not can_prepare(producer):
                return groups
            sender = BatchSender(app, producer, own_task=own_task)
            for group in groups:
                assert group.messages is not None
                if _fill(group, group.messages, producer, sender):
                    group.messages = None
                    group.own_task = own_task
    except Exception as exc:  # the broker is unreachable: build them at the instant
        logger.debug("dispatch.prepare_deferred error=%s", exc)
    return groups


def _fill(group: PreparedGroup, chunk: list[OutboxMessage], producer: Any, sender: Any) -> bool:
    """Collect each message's one LPUSH into ``group``; False if any message is not that."""
    payloads: list[bytes] = []
    keys: dict[str, int] = {}
    key_of = bytearray()
    try:
        with _collecting(producer) as collector:
            for message in chunk:
                before = len(collector.commands)
                sender.send(message)
                commands = collector.commands[before:]
                if len(commands) != 1 or commands[0][0] != "lpush" or len(commands[0][1]) != 2:
                    return False  # nothing was sent: its group goes the ordinary way
                key, payload = commands[0][1]
                if isinstance(payload, str):
                    payload = payload.encode()
                index = keys.setdefault(str(key), len(keys))
                if index > 255:
                    return False
                key_of.append(index)
                payloads.append(payload)
    except WouldSend as exc:
        if not _unavailable:
            _unavailable.append(str(exc))
            logger.error("dispatch.prepare_unavailable reason=%s", exc)
        return False
    group.keys, group.key_of = list(keys), key_of
    position = 0
    for payload in payloads:
        position += len(payload)
        group.ends.append(position)
    group.blob = zlib.compress(b"".join(payloads), 1)
    return True


def push(app: Celery, groups: Sequence[PreparedGroup], keep: set[int]) -> list[int]:
    """Send the fast-form messages of ``groups`` whose run is in ``keep``; return their run ids.

    One pipeline per :data:`PIPELINE_COMMANDS` multi-value LPUSHes. A pipeline that fails
    leaves delivery of its messages uncertain: they are not returned (their runs stay pending
    and the outbox sends them again; a copy that did arrive loses the worker's claim).
    """
    sent: list[int] = []
    pending: dict[str, list[tuple[int, bytes]]] = {}
    for group in groups:
        for run_id, key, payload in group.payloads():
            if run_id in keep:
                pending.setdefault(key, []).append((run_id, payload))
    if not pending:
        return sent
    try:
        with app.producer_or_acquire() as producer, producer.channel.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            queued: list[int] = []
            for key, items in pending.items():
                for start in range(0, len(items), PUSH_SIZE):
                    part = items[start : start + PUSH_SIZE]
                    pipe.lpush(key, *(payload for _run, payload in part))
                    queued.extend(run for run, _payload in part)
                    if len(pipe) >= PIPELINE_COMMANDS:
                        pipe.execute()
                        sent.extend(queued)
                        queued = []
            if len(pipe):
                pipe.execute()
                sent.extend(queued)
    except Exception as exc:  # redis, kombu and socket errors alike
        raise SendFailed(sent, exc) from exc
    return sent
