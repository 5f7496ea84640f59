"""The scheduler's database adapter: leadership epochs, fenced writes, due jobs, the run outbox.

Every write a leader makes goes through :meth:`RunStore.fenced`, which opens a transaction whose
first statement is ``UPDATE scheduler_lease SET last_write_at = now WHERE name = 'leader' AND
epoch = <mine> AND token = <mine>``. If a newer leader has taken over, no row matches and
:class:`FencedOut` is raised before anything is written. If the row matches, the statement holds
the row's lock until commit (PostgreSQL and InnoDB row lock; SQLite's database write lock), so a
newer leader's epoch bump waits for this transaction and every later one of the old leader
fails. The token makes the fence hold even if the epoch column is edited backwards by hand: an
old leader's epoch may come round again, its token never does. Together with the unique
constraint on (job, scheduled_for) this is what makes "one run per slot" hold when two processes
both believe they lead; the lease only keeps that situation rare.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple, cast

from django.db import connections, router, transaction
from django.db.models import (
    Case,
    DateTimeField,
    F,
    Field,
    Func,
    Min,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)

from ..conf import app_settings
from ..core.ahead import AheadPlan, plan_ahead
from ..core.catchup import CatchupPolicy, CatchupRules, SlotPlan, plan_slots
from ..core.errors import ScheduleError
from ..core.overlap import OverlapPolicy, overlap_refusal
from ..core.slots import task_id_for
from ..dbtime import DbNow, as_utc
from ..leases.base import LEADER
from ..models import (
    JobDefinition,
    JobRun,
    RunStatus,
    RunTrigger,
    SchedulerLease,
    catchup_limits,
)
from .fastinsert import insert_ignoring_conflicts

logger = logging.getLogger("django_cluster_cron.scheduler")

# The re-publish wait doubles with each copy up to 2**4 = 16 x OUTBOX_REPUBLISH_AFTER (8 minutes
# with the default 30 s): bounded copies for a long backlog, a bounded delay for a lost message.
REPUBLISH_BACKOFF_DOUBLINGS = 4
# Above this many distinct (watermark, next run) pairs in a batch, one bulk_update beats
# one UPDATE per pair.
GROUPED_UPDATE_LIMIT = 8
# Run ids per statement when checking or marking runs recorded ahead (a burst holds 100,000).
CHECK_CHUNK = 10_000
MARK_CHUNK = 5000
WAITING_STATUSES = (RunStatus.PENDING, RunStatus.QUEUED, RunStatus.RETRYING)
ALLOW = OverlapPolicy.ALLOW.value
# Job columns planning and recording never read: not loaded for a batch (thousands of rows).
NOT_PLANNED = ("description", "pause_note", "code_origin", "created_at", "updated_at")


class IdleState(NamedTuple):
    epoch: int
    token: str
    db_now: datetime
    next_due: datetime | None


class FencedOut(Exception):
    """This node's epoch is no longer current: a newer leader has taken over."""

    def __init__(self, epoch: int) -> None:
        super().__init__(f"epoch {epoch} is no longer the current leader epoch")
        self.epoch = epoch


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


@dataclass
class BatchResult:
    messages: list[OutboxMessage] = field(default_factory=list)  # due: publish now
    ahead: list[OutboxMessage] = field(default_factory=list)  # recorded ahead of their time
    jobs: int = 0
    missed: int = 0
    skipped: int = 0
    invalid: list[tuple[int, str]] = field(default_factory=list)


def new_run(
    job: JobDefinition,
    slot: datetime,
    trigger: str,
    *,
    node: str,
    epoch: int | None = None,
    status: str = RunStatus.PENDING,
    reason: str = "",
) -> JobRun:
    """An unsaved JobRun of ``job`` for ``slot``, with its deterministic task id."""
    return JobRun(
        job_id=job.pk,
        scheduled_for=slot,
        task_id=task_id_for(job.pk, slot),
        trigger=trigger,
        status=status,
        reason=reason[:255],
        dispatched_by=node,
        epoch=epoch,
    )


def overlap_refusal_for(job: JobDefinition, counts: Counter[str]) -> str | None:
    """Why ``job``'s overlap policy refuses one more run, or None (then counts it waiting).

    ``counts`` holds the job's active runs (``running``, ``waiting``) and is updated, so the
    next call for the same job sees this run waiting.
    """
    refusal = None
    if job.overlap_policy != OverlapPolicy.ALLOW.value:
        refusal = overlap_refusal(
            job.overlap_policy, running=counts["running"], waiting=counts["waiting"]
        )
    if not refusal:
        counts["waiting"] += 1
    return refusal


def dispatchable_run(
    job: JobDefinition,
    slot: datetime,
    trigger: str,
    counts: Counter[str],
    *,
    node: str,
    epoch: int | None = None,
) -> JobRun:
    """A run to dispatch, or a ``skipped`` one if the job's overlap policy refuses it."""
    refusal = overlap_refusal_for(job, counts)
    if refusal:
        return new_run(
            job, slot, trigger, node=node, epoch=epoch, status=RunStatus.SKIPPED, reason=refusal
        )
    return new_run(job, slot, trigger, node=node, epoch=epoch)


class RunRow(NamedTuple):
    """The per-run columns of a scheduled run; node and epoch are the batch's (see ROW_FIELDS)."""

    job_id: int
    scheduled_for: datetime
    due_at: datetime | None
    task_id: str
    trigger: str
    status: str
    reason: str


# The JobRun attnames a RunRow holds, in order: what fastinsert prepares per row.
ROW_FIELDS = RunRow._fields


def run_row(
    job: JobDefinition,
    slot: datetime,
    trigger: str,
    status: str,
    reason: str = "",
    due: datetime | None = None,
) -> RunRow:
    """The row :func:`new_run` would build, without a model instance (a batch builds 10,000)."""
    return RunRow(job.pk, slot, due, task_id_for(job.pk, slot), trigger, status, reason[:255])


def missed_reason(policy: str) -> str:
    """Why a slot was recorded ``missed``, in words an operator reads in the ledger."""
    late = "late: no scheduler was leading, or it fell behind"
    if policy == CatchupPolicy.ALL.value:
        cap = app_settings.CATCHUP_CAP
        return f"{late}; catch-up 'all' runs only the newest {cap} late slots"
    if policy == CatchupPolicy.LATEST.value:
        return f"{late}; catch-up 'latest' runs only the newest late slot"
    if policy == CatchupPolicy.NONE.value:
        grace = app_settings.ON_TIME_GRACE.total_seconds()
        return f"{late}; catch-up 'none' runs only slots under {grace:g} s late"
    return f"{late}; catch-up policy '{policy}'"


def withdraw_recorded_ahead(job_id: int, *, after: datetime, using: str | None = None) -> int:
    """Delete ``job_id``'s runs recorded ahead and due after ``after``, never published; return
    how many. The job was paused, deleted, re-timed or re-routed before their time: they were
    never due under its new definition, and the leader checks that a run it recorded ahead is
    still there right before it publishes it.
    """
    runs = JobRun.objects.using(using) if using else JobRun.objects
    deleted, _ = runs.filter(
        job_id=job_id, status=RunStatus.PENDING, publish_count=0, due_at__gt=after
    ).delete()
    if deleted:
        logger.info("runs.withdrawn job=%s count=%s after=%s", job_id, deleted, after.isoformat())
    return int(deleted)


def _advance(jobs: Sequence[JobDefinition]) -> None:
    """Write the jobs' new ``last_scheduled_at``/``next_run_at``.

    Jobs due at the same instant mostly end with the same pair (one cron, one slot), so one
    ``UPDATE ... WHERE id IN`` per distinct pair is far cheaper than ``bulk_update``'s CASE per
    row (whose expression building dominated a 10,000-job burst). Many distinct pairs fall back
    to ``bulk_update``, one statement per batch.
    """
    groups: dict[tuple[datetime | None, datetime | None, int | None], list[int]] = {}
    for job in jobs:
        # A job with a run limit also writes its count (the row is locked: the value is exact).
        count = job.scheduled_runs if job.max_runs is not None else None
        groups.setdefault((job.last_scheduled_at, job.next_run_at, count), []).append(job.pk)
    if len(groups) > GROUPED_UPDATE_LIMIT:
        fields = ["last_scheduled_at", "next_run_at", "scheduled_runs"]
        JobDefinition.all_objects.bulk_update(jobs, fields)
        return
    for (last, next_run, count), ids in groups.items():
        values: dict[str, Any] = {"last_scheduled_at": last, "next_run_at": next_run}
        if count is not None:
            values["scheduled_runs"] = count
        JobDefinition.all_objects.filter(pk__in=ids).update(**values)


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


def _idle_query() -> Any:
    first = (
        JobDefinition.objects.filter(enabled=True)
        .order_by()
        .annotate(m=Func(F("next_run_at"), function="MIN", output_field=DateTimeField()))
        .values("m")
    )
    return (
        SchedulerLease.objects.filter(name=LEADER)
        .annotate(db_now=DbNow(), next_due=Subquery(first))
        .order_by()
        .values_list("epoch", "token", "db_now", "next_due")[:1]
    )


class RunStore:
    """ORM implementation of the scheduler's storage; one instance per scheduler process."""

    def __init__(self) -> None:
        # The owner token of the lease this process leads with; fenced writes compare it.
        self.token: str | None = None
        self._idle_sql: dict[str, tuple[str, tuple[object, ...]]] = {}

    # -- leadership ------------------------------------------------------------------------

    def claim_leadership(self, node_id: str, token: str, now: datetime) -> int:
        """Increment the fencing epoch for this node and return the new value (the lease
        backend did not: Redis, memory)."""
        with transaction.atomic():
            SchedulerLease.objects.get_or_create(name=LEADER)
            SchedulerLease.objects.filter(name=LEADER).update(
                epoch=F("epoch") + 1, holder=node_id, token=token, acquired_at=DbNow()
            )
            epoch = int(
                SchedulerLease.objects.filter(name=LEADER).values_list("epoch", flat=True).get()
            )
        self.token = token
        return epoch

    def join_leadership(self, token: str) -> int | None:
        """The epoch the database lease's acquiring UPDATE gave ``token`` (None if the row no
        longer holds it)."""
        epoch = (
            SchedulerLease.objects.filter(name=LEADER, token=token)
            .values_list("epoch", flat=True)
            .first()
        )
        if epoch is None:
            return None
        self.token = token
        return int(epoch)

    def current_epoch(self) -> int | None:
        row = SchedulerLease.objects.filter(name=LEADER).values_list("epoch", flat=True).first()
        return None if row is None else int(row)

    @contextmanager
    def fenced(self, epoch: int, now: datetime) -> Iterator[None]:
        """A transaction that only commits writes of the current leader (see module doc)."""
        mine: dict[str, object] = {"name": LEADER, "epoch": epoch}
        if self.token is not None:
            mine["token"] = self.token
        with transaction.atomic():
            if not SchedulerLease.objects.filter(**mine).update(last_write_at=now):
                raise FencedOut(epoch)
            yield

    # -- reading ---------------------------------------------------------------------------

    def idle_state(self) -> IdleState | None:
        """One query for the idle tick: the current epoch and token, the database's clock and
        the earliest ``next_run_at`` (an indexed MIN); None if the leader row is gone.

        The statement is compiled once per connection and reused: building it through the ORM
        each tick cost several times what the database spends running it.
        """
        connection = connections[router.db_for_read(SchedulerLease)]
        compiled = self._idle_sql.get(connection.alias)
        if compiled is None:
            compiled = self._idle_sql[connection.alias] = _idle_query().query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(*compiled)
            row = cursor.fetchone()
        if row is None:
            return None
        epoch, token, db_now, next_due = row
        return IdleState(
            int(epoch),
            str(token),
            as_utc(db_now),
            None if next_due is None else as_utc(next_due),
        )

    def oldest_pending_slot(self, now: datetime) -> datetime | None:
        """The slot of the oldest run due but not taken by a worker (pending or queued): an
        index seek per status on (status, scheduled_for)."""
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

    def next_due_at(self) -> datetime | None:
        """The earliest ``next_run_at`` of any scheduled job: one indexed query."""
        result = JobDefinition.objects.filter(enabled=True).aggregate(first=Min("next_run_at"))
        value: datetime | None = result["first"]
        return value

    # -- planning and recording ------------------------------------------------------------

    def schedule_due(
        self,
        *,
        now: datetime,
        epoch: int,
        node_id: str,
        limit: int,
        horizon: datetime | None = None,
    ) -> BatchResult:
        """Plan and record one batch of due jobs under ``epoch``; return what to publish.

        One fenced transaction: lock the batch's job rows, plan each with the pure core, apply
        the overlap policy, insert every run/missed/skipped row in one statement (a row that
        already exists is left alone), advance the jobs' bookkeeping, and read back the pending
        runs this epoch recorded. With a ``horizon`` after ``now``, jobs whose overlap policy is
        ``allow`` also get their next instant due by the horizon recorded ahead
        (``result.ahead``, each with its ``due_at``); other policies decide at the instant.
        """
        result = BatchResult()
        ahead_until = horizon if horizon is not None and horizon > now else None
        with self.fenced(epoch, now):
            due = JobDefinition.objects.due_by(now, ahead_until).defer(*NOT_PLANNED)
            jobs = list(due.select_for_update()[:limit])
            if not jobs:
                return result
            limits = catchup_limits()
            rules_by: dict[tuple[object, ...], CatchupRules | str] = {}
            activity = self._activity(
                [j.pk for j in jobs if j.overlap_policy != OverlapPolicy.ALLOW.value]
            )
            rows: list[RunRow] = []
            advanced: list[JobDefinition] = []
            # Jobs due together mostly share a cron and a watermark: plan each distinct one once.
            plans: dict[tuple[object, ...], tuple[SlotPlan, AheadPlan | None]] = {}
            for job in jobs:
                rule_key = (job.catchup_policy, job.catchup_window)
                rules_or_problem = rules_by.get(rule_key)
                if rules_or_problem is None:
                    try:
                        rules_or_problem = job.catchup_rules(limits)
                    except (ScheduleError, ValueError) as exc:
                        rules_or_problem = str(exc)
                    rules_by[rule_key] = rules_or_problem
                if isinstance(rules_or_problem, str):
                    problem: str | None = rules_or_problem
                else:
                    problem = job.runtime_problem(rules_checked=True)
                if problem is not None:
                    # Bad data that bypassed validation: park the job (out of the due index)
                    # and report it; every other job goes on.
                    result.invalid.append((job.pk, problem))
                    job.next_run_at = None
                    advanced.append(job)
                    continue
                assert isinstance(rules_or_problem, CatchupRules)
                last, rules, timing = job.last_scheduled_at or now, rules_or_problem, job.timing()
                may_lead = ahead_until is not None and job.overlap_policy == ALLOW
                key = (job.cron, job.timezone, last, rules, timing, may_lead)
                planned = plans.get(key)
                if planned is None:
                    schedule = job.schedule
                    plan = plan_slots(
                        schedule, last_scheduled_at=last, now=now, rules=rules, timing=timing
                    )
                    ahead = None
                    if may_lead and ahead_until is not None:
                        ahead = plan_ahead(schedule, plan=plan, horizon=ahead_until, timing=timing)
                    planned = plans[key] = (plan, ahead)
                plan, ahead = planned
                rows.extend(self._rows_for(job, plan, ahead, activity, result))
                job.last_scheduled_at = ahead.watermark if ahead else plan.watermark
                next_run_at = ahead.next_run_at if ahead else plan.next_run_at
                job.next_run_at = None if job.runs_exhausted else next_run_at
                advanced.append(job)
            result.jobs = len(jobs)
            insert_ignoring_conflicts(
                JobRun, ROW_FIELDS, rows, {"dispatched_by": node_id, "epoch": epoch}, now=now
            )
            _advance(advanced)
            pending_ids = [r.task_id for r in rows if r.status == RunStatus.PENDING]
            if pending_ids:
                for message in self._recorded(pending_ids, epoch, jobs):
                    if message.due_at is not None and message.due_at > now:
                        result.ahead.append(message)
                    else:
                        result.messages.append(message)
        return result

    def _recorded(
        self, task_ids: list[str], epoch: int, jobs: list[JobDefinition]
    ) -> list[OutboxMessage]:
        """The messages of the runs this batch inserted, read back for their ids.

        A row that already existed (the insert left it alone) is only sent if it is ``pending``
        under this epoch. Reads tuples, not models, and takes the job's fields from the rows
        locked above: building two model instances per run dominated a large batch.
        """
        by_id = {job.pk: job for job in jobs}
        recorded = (
            JobRun.objects.filter(task_id__in=task_ids, status=RunStatus.PENDING, epoch=epoch)
            .order_by("scheduled_for", "pk")
            .values_list(
                "pk",
                "task_id",
                "job_id",
                "scheduled_for",
                "attempt",
                "epoch",
                "trigger",
                "publish_count",
                "due_at",
            )
        )
        return [
            OutboxMessage.of(
                by_id[job_id],
                run_id=pk,
                task_id=task_id,
                scheduled_for=slot,
                attempt=attempt,
                epoch=run_epoch,
                trigger=trigger,
                publish_count=count,
                due_at=due_at,
            )
            for pk, task_id, job_id, slot, attempt, run_epoch, trigger, count, due_at in recorded
        ]

    def _activity(self, job_ids: Sequence[int]) -> dict[int, Counter[str]]:
        activity: dict[int, Counter[str]] = {}
        if not job_ids:
            return activity
        active = JobRun.objects.filter(
            job_id__in=job_ids, status__in=[*WAITING_STATUSES, RunStatus.RUNNING]
        ).values_list("job_id", "status")
        for job_id, status in active:
            counts = activity.setdefault(job_id, Counter())
            counts["running" if status == RunStatus.RUNNING else "waiting"] += 1
        return activity

    def _rows_for(
        self,
        job: JobDefinition,
        plan: SlotPlan,
        ahead: AheadPlan | None,
        activity: dict[int, Counter[str]],
        result: BatchResult,
    ) -> list[RunRow]:
        rows: list[RunRow] = []
        counts = activity.setdefault(job.pk, Counter())
        for planned in (*plan.runs, *(ahead.runs if ahead else ())):
            if job.runs_exhausted:
                # Slots after the last allowed run are not the job's any more (it finished).
                logger.info(
                    "job.finished job=%s runs=%s max_runs=%s",
                    job.pk,
                    job.scheduled_runs,
                    job.max_runs,
                )
                break
            refusal = overlap_refusal_for(job, counts)
            trigger, due = planned.trigger.value, planned.due_at
            if refusal:
                result.skipped += 1
                rows.append(run_row(job, planned.slot, trigger, RunStatus.SKIPPED, refusal, due))
            else:
                rows.append(run_row(job, planned.slot, trigger, RunStatus.PENDING, due=due))
                if job.max_runs is not None:
                    job.scheduled_runs += 1
        reason = missed_reason(job.catchup_policy)
        missed = [
            run_row(job, slot, RunTrigger.CATCHUP, RunStatus.MISSED, reason) for slot in plan.missed
        ]
        if plan.unrecorded is not None:
            gap = plan.unrecorded
            count = "an unknown number of" if gap.count is None else f"{gap.count:,}"
            summary = (
                f"{count} earlier slots in ({gap.after:%Y-%m-%d %H:%M:%S}Z, "
                f"{gap.until:%Y-%m-%d %H:%M:%S}Z] were also missed (not recorded one by one)"
            )
            logger.warning("runs.missed_unrecorded job=%s %s", job.pk, summary)
            if missed:
                missed[0] = missed[0]._replace(reason=f"{reason}; {summary}"[:255])
        result.missed += len(missed)
        rows.extend(missed)
        return rows

    def _messages(self, runs: QuerySet[JobRun], limit: int | None = None) -> list[OutboxMessage]:
        ordered = runs.select_related("job").order_by("scheduled_for", "pk")[:limit]
        return [OutboxMessage.for_run(run) for run in ordered]

    # -- the outbox ------------------------------------------------------------------------

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
