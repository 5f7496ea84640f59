"""How a run row is made: an unsaved run of a job for a slot (through its overlap policy), the
compact row a batch inserts, and the reason a slot was missed. Shared by the leader's recording
and the operators' actions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from ..conf import app_settings
from ..core.catchup import CatchupPolicy
from ..core.overlap import Decision, Verdict, decide
from ..core.slots import task_id_for
from ..models import ACTIVE_STATUSES, EXECUTING_STATUSES, JobDefinition, JobRun, RunStatus


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


def activity(job_ids: Sequence[int]) -> dict[int, Counter[str]]:
    """The runs of each job ahead of a new one, as the overlap policies count them:
    ``running`` (executing, not finished), ``waiting`` (recorded, queued or waiting for a retry)
    and ``buffered`` (held back behind those). One query."""
    found: dict[int, Counter[str]] = {job_id: Counter() for job_id in job_ids}
    if not job_ids:
        return found
    ahead = JobRun.objects.filter(
        job_id__in=job_ids, status__in=(*ACTIVE_STATUSES, RunStatus.BUFFERED)
    )
    for job_id, status in ahead.values_list("job_id", "status"):
        found[job_id][_COUNTED_AS.get(status, "waiting")] += 1
    return found


_COUNTED_AS = {
    **dict.fromkeys(EXECUTING_STATUSES, "running"),
    RunStatus.BUFFERED: "buffered",
}


def overlap_decision(
    job: JobDefinition, counts: Counter[str], policy: str | None = None
) -> Decision:
    """What ``job``'s overlap policy (or ``policy``, an operator's override) does with one more
    run. ``counts`` holds the job's runs ahead (``running``, ``waiting``, ``buffered``) and is
    updated, so the next call for the same job sees this run among them."""
    decision = decide(
        policy or job.overlap_policy,
        running=counts["running"],
        waiting=counts["waiting"],
        buffered=counts["buffered"],
        max_buffered=job.buffer_limit,
    )
    if decision.verdict is Verdict.RUN:
        counts["waiting"] += 1
    elif decision.verdict is Verdict.BUFFER:
        counts["buffered"] += 1
    return decision


# The status a run is recorded with, by its overlap verdict.
RECORDED_AS = {
    Verdict.RUN: RunStatus.PENDING,
    Verdict.BUFFER: RunStatus.BUFFERED,
    Verdict.SKIP: RunStatus.SKIPPED,
}


def dispatchable_run(
    job: JobDefinition,
    slot: datetime,
    trigger: str,
    counts: Counter[str],
    *,
    node: str,
    epoch: int | None = None,
    policy: str | None = None,
) -> tuple[JobRun, Decision]:
    """A run to dispatch — ``pending``, or ``buffered`` or ``skipped`` as the job's overlap
    policy (or the override ``policy``) decides — and that decision."""
    decision = overlap_decision(job, counts, policy)
    status = RECORDED_AS[decision.verdict]
    run = new_run(job, slot, trigger, node=node, epoch=epoch, status=status, reason=decision.reason)
    return run, decision


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
    return f"late: no scheduler was leading, or it fell behind; {catchup_rule(policy)}"


def catchup_rule(policy: str) -> str:
    """What a catch-up policy runs of late slots, in the ledger's words."""
    if policy == CatchupPolicy.ALL.value:
        return f"catch-up 'all' runs only the newest {app_settings.CATCHUP_CAP} late slots"
    if policy == CatchupPolicy.LATEST.value:
        return "catch-up 'latest' runs only the newest late slot"
    if policy == CatchupPolicy.NONE.value:
        grace = app_settings.ON_TIME_GRACE.total_seconds()
        return f"catch-up 'none' runs only slots under {grace:g} s late"
    return f"catch-up policy '{policy}'"
