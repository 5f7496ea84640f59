"""The run outbox: the rows are the messages to send. What a message of a run holds, recording
that messages reached the broker, finding what must be sent (again), and recovering runs whose
worker was lost. Part of :class:`~django_cluster_cron.scheduler.store.RunStore`; every write a
leader makes here is fenced (see that module).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from django.db import connections, router, transaction
from django.db.models import Case, F, Field, Q, QuerySet, Value, When

from ..conf import app_settings
from ..models import WAITING_STATUSES, JobDefinition, JobRun, RunStatus

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
    ) -> OutboxMessage:
        """The message of a run of ``job`` given by its fields (no JobRun instance needed)."""
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
        )


@dataclass(frozen=True)
class LostRun:
    run: JobRun
    retried: bool
    reason: str


class _Dispatcher(NamedTuple):
    node_id: str | None
    epoch: int


def _mark_queued(
    run_ids: Sequence[int],
    count: int,
    republish_at: datetime,
    now: datetime,
    by: _Dispatcher | None = None,
) -> None:
    """One UPDATE: ``pending`` becomes ``queued`` in the same statement that sets the re-publish
    bookkeeping, so each row is written once. A run's first publish also stamps ``queued_at``
    and names the leader that sent it (``by``) — even if a worker took it meanwhile (a message
    can be claimed before this runs). The CASEs come before ``status`` and ``publish_count``:
    MySQL and MariaDB evaluate SET left to right, each assignment seeing the ones before it, and
    they must read the old values."""

    def when(condition: Q, field: str, value: object) -> Case:
        output = cast("Field[Any, Any]", JobRun._meta.get_field(field))
        return Case(When(condition, then=Value(value)), default=F(field), output_field=output)

    first = Q(publish_count=0)
    fields: dict[str, Any] = {"queued_at": when(first, "queued_at", now)}
    if by is not None:
        fields["epoch"] = when(first, "epoch", by.epoch)
        if by.node_id:
            fields["dispatched_by"] = when(first, "dispatched_by", by.node_id)
    waiting = Q(status__in=WAITING_STATUSES) | first
    JobRun.objects.filter(waiting, pk__in=run_ids).update(
        **fields,
        status=when(Q(status=RunStatus.PENDING), "status", RunStatus.QUEUED),
        publish_count=count + 1,
        republish_at=republish_at,
    )


class Outbox:
    """The outbox's reads and writes (mixed into the scheduler's store, whose ``fenced``
    transaction they write in)."""

    if TYPE_CHECKING:

        def fenced(self, epoch: int, now: datetime) -> AbstractContextManager[None]: ...

    def _messages(self, runs: QuerySet[JobRun], limit: int | None = None) -> list[OutboxMessage]:
        ordered = runs.select_related("job").order_by("scheduled_for", "pk")[:limit]
        return [OutboxMessage.for_run(run) for run in ordered]

    def mark_published(
        self,
        messages: Sequence[OutboxMessage],
        *,
        now: datetime,
        epoch: int | None = None,
        node_id: str | None = None,
    ) -> None:
        """Record that these messages reached the broker.

        ``pending`` runs become ``queued``; a leader (``epoch``, ``node_id``) that sends a run
        the first time writes itself as the run's dispatcher — it may have been recorded by
        its predecessor, ahead of its time. Every run gets ``publish_count + 1`` and a
        ``republish_at``: if no worker has started it by then, the leader's sweep sends it again
        — a broker that lost its queue (a Redis restart without persistence) cannot strand a run.
        The wait is ``OUTBOX_REPUBLISH_AFTER`` doubled with each copy up to 16 times that (and
        counted from the ETA for a retry), so a long but healthy backlog costs only a few extra
        copies per run and a lost message waits at most 16 x ``OUTBOX_REPUBLISH_AFTER``.
        """
        if not messages:
            return
        if epoch is None:
            with transaction.atomic():
                self._mark_published(messages, now)
        else:
            with self.fenced(epoch, now):
                self._mark_published(messages, now, _Dispatcher(node_id, epoch))

    def _mark_published(
        self, messages: Sequence[OutboxMessage], now: datetime, by: _Dispatcher | None = None
    ) -> None:
        base = app_settings.OUTBOX_REPUBLISH_AFTER
        groups: dict[tuple[int, datetime], list[int]] = {}
        for message in messages:
            start = max(now, message.eta) if message.eta else now
            due = start + base * 2 ** min(message.publish_count, REPUBLISH_BACKOFF_DOUBLINGS)
            groups.setdefault((message.publish_count, due), []).append(message.run_id)
        # One UPDATE per group (a burst is one group).
        for (count, due), run_ids in groups.items():
            _mark_queued(run_ids, count, due, now, by)

    def mark_sent(
        self, sent: Sequence[tuple[list[int], datetime]], *, epoch: int, node_id: str
    ) -> None:
        """:meth:`mark_published` for runs published the first time, given by their ids with
        when they were sent (the runs recorded ahead, whose messages the leader keeps in a
        compact form): one fenced transaction, a statement per MARK_CHUNK runs."""
        if not any(run_ids for run_ids, _at in sent):
            return
        by = _Dispatcher(node_id, epoch)
        with self.fenced(epoch, max(at for _ids, at in sent)):
            for run_ids, at in sent:
                due = at + app_settings.OUTBOX_REPUBLISH_AFTER
                for start in range(0, len(run_ids), MARK_CHUNK):
                    _mark_queued(run_ids[start : start + MARK_CHUNK], 0, due, at, by)

    def unpublished(self, run_ids: Sequence[int]) -> set[int]:
        """Which of these runs are still ``pending`` and never published: checked right before
        publishing runs recorded ahead (a withdrawn run is gone, a cancelled one is not
        pending, one another leader published is not unpublished)."""
        found: set[int] = set()
        connection = connections[router.db_for_read(JobRun)]
        quote = connection.ops.quote_name
        table = quote(JobRun._meta.db_table)
        run_id, status, sent = quote("id"), quote("status"), quote("publish_count")
        # Looked up by primary key: the planner would otherwise scan the pending runs through
        # the status index and test each against the whole list (0.25 s for 10,000 here).
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

    def unpublished_runs(
        self, *, after: tuple[datetime, int] | None, limit: int
    ) -> list[OutboxMessage]:
        """Runs recorded and never published, by slot, after ``(slot, id)``: what a new leader
        takes over (its predecessor's runs recorded ahead, or recorded before a crash)."""
        runs = JobRun.objects.filter(status=RunStatus.PENDING, publish_count=0)
        if after is not None:
            slot, run_id = after
            runs = runs.filter(Q(scheduled_for__gt=slot) | Q(scheduled_for=slot, pk__gt=run_id))
        return self._messages(runs, limit)

    def stale_pending(
        self, *, now: datetime, older_than: timedelta, limit: int
    ) -> list[OutboxMessage]:
        """Runs whose message may not be in the broker: publish them (again).

        ``pending`` runs never published whose due time (or, for an operator's run, creation)
        is older than ``older_than`` (a crash or a broker outage between commit and publish);
        and waiting runs (``pending``, ``queued``, ``retrying``) whose ``republish_at`` has
        passed without a worker starting them. Never a run before it is due.
        """
        not_early = Q(due_at__isnull=True) | Q(due_at__lte=now)
        never_sent = Q(status=RunStatus.PENDING, publish_count=0) & (
            Q(due_at__isnull=True, created_at__lte=now - older_than)
            | Q(due_at__lte=now - older_than)
        )
        stale = JobRun.objects.filter(
            never_sent | (Q(status__in=WAITING_STATUSES, republish_at__lte=now) & not_early)
        )
        return self._messages(stale, limit)

    def recover_lost(
        self, *, now: datetime, lost_after: timedelta, epoch: int, limit: int
    ) -> list[LostRun]:
        """Runs whose worker stopped heartbeating: retry them or fail them, per job policy."""
        recovered: list[LostRun] = []
        with self.fenced(epoch, now):
            lost = (
                JobRun.objects.select_for_update()
                .select_related("job")
                .filter(status=RunStatus.RUNNING, heartbeat_at__lt=now - lost_after)
                .order_by("heartbeat_at")[:limit]
            )
            for run in lost:
                recovered.append(self._recover(run, now))
        return recovered

    def _recover(self, run: JobRun, now: datetime) -> LostRun:
        job = run.job
        seen = run.heartbeat_at or run.started_at or now
        ran_for = (now - run.started_at).total_seconds() if run.started_at else 0.0
        if job.time_limit and ran_for >= job.time_limit:
            reason = f"killed: hard time limit of {job.time_limit} s exceeded"
        else:
            reason = (
                f"worker lost: {run.worker or 'its worker'} stopped heartbeating at "
                f"{seen:%Y-%m-%d %H:%M:%S}Z"
            )
        retry = job.on_worker_lost == "retry" and run.attempt <= job.max_retries
        fields: dict[str, object] = {"error": reason, "finished_at": now}
        if run.started_at:
            fields["duration"] = now - run.started_at
        if retry:
            fields.update(
                status=RunStatus.RETRYING, attempt=run.attempt + 1, retry_at=now, republish_at=now
            )
        else:
            fields.update(status=RunStatus.FAILED)
        JobRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING, attempt=run.attempt).update(
            **fields
        )
        for name, value in fields.items():
            setattr(run, name, value)
        return LostRun(run=run, retried=retry, reason=reason)
