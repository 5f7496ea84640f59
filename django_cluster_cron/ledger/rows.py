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
from ..core.overlap import OverlapPolicy, overlap_refusal
from ..core.slots import task_id_for
from ..models import ACTIVE_STATUSES, JobDefinition, JobRun, RunStatus


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
    """The active runs of each job, as the overlap policies count them: ``running`` (started,
    not finished) and ``waiting`` (recorded, queued or waiting for a retry). One query."""
    found: dict[int, Counter[str]] = {job_id: Counter() for job_id in job_ids}
    if not job_ids:
        return found
    active = JobRun.objects.filter(job_id__in=job_ids, status__in=ACTIVE_STATUSES)
    for job_id, status in active.values_list("job_id", "status"):
        found[job_id]["running" if status == RunStatus.RUNNING else "waiting"] += 1
    return found


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
