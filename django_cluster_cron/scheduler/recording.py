"""The leader's recording: plan and record due jobs' runs in fenced batches, and the idle tick's
one query.

Each batch is one transaction behind the leader's fence (:mod:`django_cluster_cron.ledger.fence`):
lock the batch's job rows, plan each with the pure core, apply the overlap policy, insert every
run/missed/skipped row in one statement (a row that already exists is left alone: the unique
constraint on (job, slot)), advance the jobs' bookkeeping, and read back the pending runs to
publish. How a row is made is :mod:`django_cluster_cron.ledger.rows`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connections, router
from django.db.models import Min, Subquery

from ..core.ahead import AheadPlan, plan_ahead
from ..core.catchup import CatchupRules, SlotPlan, plan_slots
from ..core.errors import ScheduleError
from ..core.exclusions import ExcludingSchedule
from ..core.overlap import OverlapPolicy, Verdict
from ..dbconn import ServerReadOnly
from ..dbtime import DbNow, as_utc
from ..leases.base import LEADER
from ..ledger.buffer import preempt
from ..ledger.fastinsert import insert_ignoring_conflicts
from ..ledger.fence import Fence
from ..ledger.outbox import OutboxMessage
from ..ledger.rows import (
    RECORDED_AS,
    ROW_FIELDS,
    RunRow,
    activity,
    missed_reason,
    overlap_decision,
    run_row,
)
from ..models import JobDefinition, JobRun, RunStatus, RunTrigger, SchedulerLease, catchup_limits
from ..models.fields import NOT_PLANNED
from ..models.jobs import next_due_after

logger = logging.getLogger("django_cluster_cron.scheduler")

# Above this many distinct (watermark, next run) pairs in a batch, one bulk_update beats
# one UPDATE per pair.
GROUPED_UPDATE_LIMIT = 8
ALLOW = OverlapPolicy.ALLOW.value


class IdleState(NamedTuple):
    epoch: int
    token: str
    db_now: datetime
    next_due: datetime | None
    read_only: bool = False  # the server answering refuses writes (a demoted primary)
    writes: int = 0  # the leader row's count of writes (any term's) and the last one's time
    last_write_at: datetime | None = None


@dataclass
class BatchResult:
    messages: list[OutboxMessage] = field(default_factory=list)  # due: publish now
    ahead: list[OutboxMessage] = field(default_factory=list)  # recorded ahead of their time
    jobs: int = 0
    missed: int = 0
    skipped: int = 0
    invalid: list[tuple[int, str]] = field(default_factory=list)
    # Slots not run, by (job name, why): the cluster_cron_slots_not_run_total metric.
    not_run: Counter[tuple[str, str]] = field(default_factory=Counter)
    # Jobs whose newest slot waits for their runs to stop (cancel_other, terminate_other).
    preempt: dict[int, tuple[JobDefinition, datetime]] = field(default_factory=dict)


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


def _idle_query() -> Any:
    # The earliest next run as the first of the due index in order: as MIN(), MariaDB read
    # every job (the condition on enabled kept it from the index's first entry), 42 ms a tick
    # at 100,000 jobs.
    first = (
        JobDefinition.objects.filter(enabled=True, next_run_at__isnull=False)
        .order_by("next_run_at")
        .values("next_run_at")[:1]
    )
    return (
        SchedulerLease.objects.filter(name=LEADER)
        .annotate(db_now=DbNow(), next_due=Subquery(first), read_only=ServerReadOnly())
        .order_by()
        .values_list(
            "epoch", "token", "db_now", "next_due", "read_only", "writes", "last_write_at"
        )[:1]
    )


class Recorder:
    """The leader's reads and writes of due jobs; one per scheduler process."""

    def __init__(self) -> None:
        self._idle_sql: dict[str, tuple[str, tuple[object, ...]]] = {}

    # -- reading ---------------------------------------------------------------------------

    def idle_state(self) -> IdleState | None:
        """One query for the idle tick: the current epoch and token, the database's clock, the
        earliest ``next_run_at`` (an indexed MIN) and whether the server refuses writes (a
        primary demoted after a failover still answers reads); None if the leader row is gone.

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
        epoch, token, db_now, next_due, read_only, writes, last_write_at = row
        return IdleState(
            int(epoch),
            str(token),
            as_utc(db_now),
            None if next_due is None else as_utc(next_due),
            bool(read_only),
            int(writes),
            None if last_write_at is None else as_utc(last_write_at),
        )

    def next_due_at(self) -> datetime | None:
        """The earliest ``next_run_at`` of any scheduled job: one indexed query."""
        result = JobDefinition.objects.filter(enabled=True).aggregate(first=Min("next_run_at"))
        value: datetime | None = result["first"]
        return value

    def return_parked(self, now: datetime) -> list[int]:
        """Bring back the jobs parked for a problem that is gone (a task the ``TASK_ALLOWLIST``
        admits again after a deploy, a row fixed by hand): they owe slots from ``now``, as after
        a resume. The ids brought back. A leader calls it once per term.

        A job without a next run is not always parked: one whose last slot (a one-off's only
        one, the last before its ``end_at``) was recorded ahead has decided every slot it has,
        its watermark past ``now``. Slots are looked for after the watermark when it lies ahead,
        so such a job finds none and stays as it is; the watermark never goes back."""
        returned = []
        for job in JobDefinition.objects.filter(enabled=True, next_run_at__isnull=True):
            if not job.is_scheduled or job.runtime_problem() is not None:
                continue  # finished, or still wrong
            decided = job.last_scheduled_at
            after = decided if decided is not None and decided > now else now
            next_run = next_due_after(job, after)
            if next_run is None:  # past its end, its last slot decided, or one never fires
                continue
            # Conditional: a row an operator changed meanwhile is theirs.
            if JobDefinition.objects.filter(pk=job.pk, next_run_at__isnull=True).update(
                next_run_at=next_run, last_scheduled_at=after
            ):
                returned.append(job.pk)
        return returned

    # -- planning and recording ------------------------------------------------------------

    def schedule_due(
        self,
        *,
        now: datetime,
        fence: Fence,
        node_id: str,
        limit: int,
        horizon: datetime | None = None,
    ) -> BatchResult:
        """Plan and record one batch of due jobs under ``fence``; return what to publish.

        One fenced transaction: lock the batch's job rows, plan each with the pure core, apply
        the overlap policy, insert every run/missed/skipped row in one statement (a row that
        already exists is left alone), advance the jobs' bookkeeping, and read back the pending
        runs this epoch recorded. With a ``horizon`` after ``now``, jobs whose overlap policy is
        ``allow`` also get their next instant due by the horizon recorded ahead
        (``result.ahead``, each with its ``due_at``); other policies decide at the instant.
        """
        result = BatchResult()
        ahead_until = horizon if horizon is not None and horizon > now else None
        with fence.transaction(now):
            due = JobDefinition.objects.due_by(now, ahead_until).defer(*NOT_PLANNED)
            jobs = list(due.select_for_update()[:limit])
            if not jobs:
                return result
            limits = catchup_limits()
            rules_by: dict[tuple[object, ...], CatchupRules | str] = {}
            active = activity([j.pk for j in jobs if j.overlap_policy != ALLOW])
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
                # The parsed schedule stands for everything that makes the slots: the text,
                # the zone, an interval's anchor, the exclusions (jobs that share all of it
                # share one plan).
                schedule = job.schedule
                key = (schedule, last, rules, timing, may_lead)
                planned = plans.get(key)
                if planned is None:
                    plan = plan_slots(
                        schedule, last_scheduled_at=last, now=now, rules=rules, timing=timing
                    )
                    ahead = None
                    if may_lead and ahead_until is not None:
                        ahead = plan_ahead(schedule, plan=plan, horizon=ahead_until, timing=timing)
                    planned = plans[key] = (plan, ahead)
                plan, ahead = planned
                rows.extend(self._rows_for(job, plan, ahead, active, result))
                watermark = ahead.watermark if ahead else plan.watermark
                if isinstance(schedule, ExcludingSchedule) and watermark > last:
                    excluded = schedule.excluded_between(last, watermark)
                    result.not_run[job.name, "excluded"] += excluded
                job.last_scheduled_at = watermark
                next_run_at = ahead.next_run_at if ahead else plan.next_run_at
                job.next_run_at = None if job.runs_exhausted else next_run_at
                advanced.append(job)
            result.jobs = len(jobs)
            constants = {"dispatched_by": node_id, "epoch": fence.epoch}
            insert_ignoring_conflicts(JobRun, ROW_FIELDS, rows, constants, now=now)
            for job, slot in result.preempt.values():
                stopped = preempt(job, slot)
                result.not_run[job.name, "cancelled"] += stopped.cancelled
                result.not_run[job.name, "overlap"] += stopped.superseded
            _advance(advanced)
            pending_ids = [r.task_id for r in rows if r.status == RunStatus.PENDING]
            if pending_ids:
                for message in self._recorded(pending_ids, fence.epoch, jobs):
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
            decision = overlap_decision(job, counts)
            trigger, due = planned.trigger.value, planned.due_at
            status = RECORDED_AS[decision.verdict]
            rows.append(run_row(job, planned.slot, trigger, status, decision.reason, due))
            if decision.verdict is Verdict.SKIP:
                result.skipped += 1
                result.not_run[job.name, decision.why_not_run] += 1
                continue
            if decision.stop_others:
                result.preempt[job.pk] = (job, planned.slot)
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
        if missed:
            result.not_run[job.name, "catchup_window"] += len(missed)
        rows.extend(missed)
        return rows
