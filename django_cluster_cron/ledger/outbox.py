"""The run outbox: the rows are the messages to send. What a message of a run holds, recording
that messages reached the broker, and finding what must be sent (again). A leader's writes here
go through its :class:`~django_cluster_cron.ledger.fence.Fence`; an operator's and a worker's
carry no epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from django.db import connections, router, transaction
from django.db.models import Case, F, Field, Max, Q, QuerySet, Value, When

from ..conf import app_settings
from ..dbtime import as_utc
from ..models import WAITING_STATUSES, JobDefinition, JobRun, RunStatus
from .fence import Fence

# The re-publish wait doubles with each copy up to 2**4 = 16 x OUTBOX_REPUBLISH_AFTER (8 minutes
# with the default 30 s): bounded copies for a long backlog, a bounded delay for a lost message.
REPUBLISH_BACKOFF_DOUBLINGS = 4
# Run ids per statement when checking or marking runs recorded ahead (a burst holds 100,000).
CHECK_CHUNK = 10_000
MARK_CHUNK = 5000


@dataclass(frozen=True)
class OutboxMessage:
    """What the dispatcher needs to publish one recorded run."""

    run_id: int
    task_id: str
    job_id: int
    scheduled_for: datetime
    attempt: int
    epoch: int | None
    trigger: str
    queue: str | None
    priority: int | None
    expires: datetime | None
    soft_time_limit: int | None = None
    time_limit: int | None = None
    eta: datetime | None = None
    publish_count: int = 0
    due_at: datetime | None = None  # not to be sent before (the slot plus its jitter)
    # The job's own Celery task and its arguments: what the message runs.
    task: str = ""
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    # The leader's dispatch span (W3C traceparent) when tracing is on (ops.tracing).
    trace: str = ""
    # The job's name: what an execution system's own tools show to say whose run it is.
    job_name: str = ""
    # A run recorded ahead whose task a leader already enqueued, deferred to its due time, on a
    # backend that can defer (django.tasks), and that is not recorded sent yet: the backend's
    # result id. Sending it again would only make a copy for the claim to drop.
    enqueued: str = ""
    # A piece of the run (its index; the completion message's is -1), not the run itself: the
    # piece's own task id and attempt (:mod:`.pieces`).
    piece: int | None = None

    @property
    def due(self) -> datetime:
        """When it is due: its ``due_at``, else its slot."""
        return self.scheduled_for if self.due_at is None else self.due_at

    @classmethod
    def for_run(cls, run: JobRun, eta: datetime | None = None) -> OutboxMessage:
        return cls.of(
            run.job,
            run_id=run.pk,
            task_id=run.task_id,
            scheduled_for=run.scheduled_for,
            attempt=run.attempt,
            epoch=run.epoch,
            trigger=run.trigger,
            publish_count=run.publish_count,
            eta=eta,
            due_at=run.due_at,
            kwargs_override=run.kwargs_override,
            enqueued=(
                run.backend_result_id
                if run.status == RunStatus.PENDING and not run.publish_count
                else ""
            ),
        )

    @classmethod
    def of(
        cls,
        job: JobDefinition,
        *,
        run_id: int,
        task_id: str,
        scheduled_for: datetime,
        attempt: int,
        epoch: int | None,
        trigger: str,
        publish_count: int,
        eta: datetime | None = None,
        due_at: datetime | None = None,
        enqueued: str = "",
        kwargs_override: dict[str, Any] | None = None,
    ) -> OutboxMessage:
        """The message of a run of ``job`` given by its fields (no JobRun instance needed); the
        run's own keyword arguments, if it has any, over the job's."""
        return cls(
            run_id=run_id,
            task_id=task_id,
            job_id=job.pk,
            scheduled_for=scheduled_for,
            attempt=attempt,
            epoch=epoch,
            trigger=trigger,
            queue=job.queue or app_settings.DEFAULT_QUEUE,
            priority=job.priority,
            expires=(scheduled_for + timedelta(seconds=job.expires) if job.expires else None),
            soft_time_limit=job.soft_time_limit,
            time_limit=job.time_limit,
            eta=eta,
            publish_count=publish_count,
            due_at=due_at,
            task=job.task,
            args=tuple(job.args or ()),
            kwargs={**(job.kwargs or {}), **(kwargs_override or {})},
            job_name=job.name,
            enqueued=enqueued,
        )


def _mark_queued(
    run_ids: Sequence[int],
    republish_at: datetime,
    now: datetime,
    fence: Fence | None = None,
    node_id: str | None = None,
) -> None:
    """One UPDATE: ``pending`` becomes ``queued`` in the same statement that sets the re-publish
    bookkeeping, so each row is written once. A run's first publish also stamps ``queued_at``
    and, sent by a leader (``fence``), names it — even if a worker took the run meanwhile (a
    message can be claimed before this runs). ``publish_count`` goes up by one in the row itself,
    not to ``count + 1``: a worker may have sent and recorded a retry before the leader records
    the first send (it does so at the end of its pass), and neither may erase the other. The
    CASEs come before ``status`` and ``publish_count``: MySQL and MariaDB evaluate SET left to
    right, each assignment seeing the ones before it, and they must read the old values."""

    def when(condition: Q, field: str, value: object) -> Case:
        output = cast("Field[Any, Any]", JobRun._meta.get_field(field))
        return Case(When(condition, then=Value(value)), default=F(field), output_field=output)

    first = Q(publish_count=0)
    fields: dict[str, Any] = {"queued_at": when(first, "queued_at", now)}
    if fence is not None:
        fields["epoch"] = when(first, "epoch", fence.epoch)
        if node_id:
            fields["dispatched_by"] = when(first, "dispatched_by", node_id)
    waiting = Q(status__in=WAITING_STATUSES) | first
    JobRun.objects.filter(waiting, pk__in=run_ids).update(
        **fields,
        status=when(Q(status=RunStatus.PENDING), "status", RunStatus.QUEUED),
        publish_count=F("publish_count") + 1,
        republish_at=republish_at,
    )


def mark_published(
    messages: Sequence[OutboxMessage],
    *,
    now: datetime,
    fence: Fence | None = None,
    node_id: str | None = None,
    not_before: datetime | None = None,
) -> None:
    """Record that these messages reached the broker.

    ``pending`` runs become ``queued``; a leader (``fence``, ``node_id``) that sends a run the
    first time writes itself as the run's dispatcher — it may have been recorded by its
    predecessor, ahead of its time. Every run gets ``publish_count + 1`` and a
    ``republish_at``: if no worker has started it by then, the leader's sweep sends it again — a
    broker that lost its queue (a Redis restart without persistence) cannot strand a run. The
    wait is ``OUTBOX_REPUBLISH_AFTER`` doubled with each copy up to 16 times that, counted from
    ``not_before`` when the run may not start earlier (a retry's time), so a long but healthy
    backlog costs only a few extra copies per run and a lost message waits at most 16 x
    ``OUTBOX_REPUBLISH_AFTER``.
    """
    if not messages:
        return
    base = app_settings.OUTBOX_REPUBLISH_AFTER
    start = max(now, not_before) if not_before else now
    groups: dict[tuple[int, datetime], list[int]] = {}
    for message in messages:
        due = start + base * 2 ** min(message.publish_count, REPUBLISH_BACKOFF_DOUBLINGS)
        groups.setdefault((message.publish_count, due), []).append(message.run_id)
    with fence.transaction(now) if fence is not None else transaction.atomic():
        for (_sends, due), run_ids in groups.items():  # one UPDATE per group (a burst is one)
            _mark_queued(run_ids, due, now, fence, node_id)


def mark_sent(sent: Sequence[tuple[list[int], datetime]], *, fence: Fence, node_id: str) -> None:
    """:func:`mark_published` for runs a leader published the first time, given by their ids
    with when they were sent (the runs recorded ahead, whose messages the leader keeps in a
    compact form): one fenced transaction, a statement per MARK_CHUNK runs."""
    if not any(run_ids for run_ids, _at in sent):
        return
    with fence.transaction(max(at for _ids, at in sent)):
        for run_ids, at in sent:
            due = at + app_settings.OUTBOX_REPUBLISH_AFTER
            for start in range(0, len(run_ids), MARK_CHUNK):
                _mark_queued(run_ids[start : start + MARK_CHUNK], due, at, fence, node_id)


def note_enqueued_ahead(enqueued: Sequence[tuple[int, str]]) -> None:
    """Record on runs recorded ahead that their task is on its backend already, deferred to
    their due time (``(run id, the backend's result id)``): a leader that takes them over before
    their instant does not enqueue them again (:attr:`OutboxMessage.enqueued`)."""
    runs = [JobRun(pk=run_id, backend_result_id=result_id[:64]) for run_id, result_id in enqueued]
    # Only runs still waiting for their first send: a worker may have claimed one already.
    waiting = JobRun.objects.filter(status=RunStatus.PENDING, publish_count=0)
    waiting.bulk_update(runs, ["backend_result_id"], batch_size=500)


def unpublished(run_ids: Sequence[int]) -> set[int]:
    """Which of these runs are still ``pending`` and never published: checked right before
    publishing runs recorded ahead (a withdrawn run is gone, a cancelled one is not pending, one
    another leader published is not unpublished)."""
    found: set[int] = set()
    connection = connections[router.db_for_read(JobRun)]
    quote = connection.ops.quote_name
    table = quote(JobRun._meta.db_table)
    run_id, status, sent = quote("id"), quote("status"), quote("publish_count")
    # Looked up by primary key: the planner would otherwise scan the pending runs through the
    # status index and test each against the whole list (0.25 s for 10,000 here).
    if connection.vendor == "postgresql":
        sql = (
            f"SELECT r.{run_id} FROM UNNEST(%s::bigint[]) AS u(id) JOIN {table} r"
            f" ON r.{run_id} = u.id WHERE r.{status} = %s AND r.{sent} = 0"
        )
    else:
        sql = f"SELECT {run_id} FROM {table} WHERE {status} = %s AND {sent} = 0 AND {run_id} "
    with connection.cursor() as cursor:
        for start in range(0, len(run_ids), CHECK_CHUNK):
            chunk = list(run_ids[start : start + CHECK_CHUNK])
            if connection.vendor == "postgresql":
                cursor.execute(sql, [chunk, str(RunStatus.PENDING)])
            else:
                marks = ", ".join(["%s"] * len(chunk))
                cursor.execute(sql + f"IN ({marks})", [str(RunStatus.PENDING), *chunk])
            found.update(int(row[0]) for row in cursor.fetchall())
    return found


def _messages(runs: QuerySet[JobRun], limit: int | None = None) -> list[OutboxMessage]:
    ordered = runs.select_related("job").order_by("scheduled_for", "pk")[:limit]
    return [OutboxMessage.for_run(run) for run in ordered]


def messages_of(run_ids: Sequence[int]) -> list[OutboxMessage]:
    """The messages of these runs, read from their rows, by slot."""
    return _messages(JobRun.objects.filter(pk__in=run_ids))


def unpublished_runs(*, after: tuple[datetime, int] | None, limit: int) -> list[OutboxMessage]:
    """Runs recorded and never published, by slot, after ``(slot, id)``: what a new leader takes
    over (its predecessor's runs recorded ahead, or recorded before a crash)."""
    runs = JobRun.objects.filter(status=RunStatus.PENDING, publish_count=0)
    if after is not None:
        slot, run_id = after
        runs = runs.filter(Q(scheduled_for__gt=slot) | Q(scheduled_for=slot, pk__gt=run_id))
    return _messages(runs, limit)


# A queue as the outbox reasons about it: the queue a run's message went to (None: left to
# Celery's routing) and its priority (None: the task's own). Runs of one queue and priority
# leave the broker in the order they were sent, give or take what workers prefetched.
QueueKey = tuple[str | None, int | None]


def _queue_key(queue: str | None, priority: int | None) -> QueueKey:
    return (queue or app_settings.DEFAULT_QUEUE or None, priority)


def _in_queue(key: QueueKey) -> Q:
    queue, priority = key
    default = app_settings.DEFAULT_QUEUE or None
    names = {"", queue} if queue == default else {queue}
    in_queue = Q(job__queue__in=names - {None})
    if priority is None:
        return in_queue & Q(job__priority__isnull=True)
    return in_queue & Q(job__priority=priority)


def queue_progress(*, now: datetime, window: timedelta) -> dict[QueueKey, datetime | None]:
    """What workers took from each queue in the last ``window``: for every queue (and priority)
    from which a worker claimed a run since then, the latest time one of those runs was first
    sent (None when none was recorded as sent yet). A queue missing here made no progress.

    One statement, an index range on ``started_at``."""
    claimed = (
        JobRun.objects.filter(started_at__gte=now - window)
        .values("job__queue", "job__priority")
        .annotate(sent=Max("queued_at"))
        .order_by()
    )
    progress: dict[QueueKey, datetime | None] = {}
    for row in claimed:
        key = _queue_key(row["job__queue"], row["job__priority"])
        # '' and the default queue's name are one queue: merge their rows.
        known = progress.get(key)
        found = [as_utc(row["sent"])] if row["sent"] is not None else []
        if known is not None:
            found.append(known)
        progress[key] = max(found) if found else None
    return progress


def stale_pending(
    *,
    now: datetime,
    older_than: timedelta,
    limit: int,
    progress: dict[QueueKey, datetime | None] | None = None,
) -> list[OutboxMessage]:
    """Runs whose message may not be in the broker: publish them (again).

    * ``pending`` runs never published whose due time (or, for an operator's run, creation) is
      older than ``older_than``: a crash or a broker outage between commit and publish.
    * Waiting runs (``pending``, ``queued``, ``retrying``) whose ``republish_at`` has passed
      without a worker starting them, and whose message shows a sign of loss. With
      ``progress`` (:func:`queue_progress`), a run is held back while its queue is moving and
      nothing sent after the run's ``republish_at`` has been taken from it: it is waiting its
      turn in a backlog, not lost. It is sent again when its queue stalls (no claim in the
      window although it waits) or when a run sent later than its ``republish_at`` was taken
      before it (it was overtaken: its message is gone). Without ``progress``, the wait alone.

    Never a run before it is due.
    """
    not_early = Q(due_at__isnull=True) | Q(due_at__lte=now)
    never_sent = Q(status=RunStatus.PENDING, publish_count=0) & (
        Q(due_at__isnull=True, created_at__lte=now - older_than) | Q(due_at__lte=now - older_than)
    )
    overdue = Q(status__in=WAITING_STATUSES, republish_at__lte=now) & not_early
    for key, sent in (progress or {}).items():
        in_line = _in_queue(key)
        if sent is not None:
            in_line &= Q(republish_at__gte=sent)
        overdue &= ~in_line
    return _messages(JobRun.objects.filter(never_sent | overdue), limit)


def overdue_exists(now: datetime) -> bool:
    """Whether any waiting run is past its ``republish_at`` (an index seek per status): the
    sweep looks at the queues' progress only then."""
    return bool(JobRun.objects.filter(status__in=WAITING_STATUSES, republish_at__lte=now).exists())


def oldest_pending_slot(now: datetime) -> datetime | None:
    """The slot of the oldest run due but not taken by a worker (pending or queued): an index
    seek per status on (status, scheduled_for)."""
    slots = [
        JobRun.objects.filter(status=status, scheduled_for__lte=now)
        .exclude(due_at__gt=now)  # recorded ahead (or jittered) and not due yet
        .order_by("scheduled_for")
        .values_list("scheduled_for", flat=True)
        .first()
        for status in (RunStatus.PENDING, RunStatus.QUEUED)
    ]
    found = [as_utc(slot) for slot in slots if slot is not None]
    return min(found) if found else None
