"""What the cluster is doing right now, read the way the admin's cluster page reads it.

Leader, lease time left, epoch and the node reports come from
:func:`django_cluster_cron.ops.status.cluster_status`; jobs and runs from the ORM. A snapshot is
plain data, so the view and the narrator need no database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError
from django.db.models import Count
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_cluster_cron.describe import describe
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from django_cluster_cron.ops.status import cluster_status

RECENT_RUNS = 14


@dataclass
class JobRow:
    name: str
    schedule: str
    timezone: str
    next_run_at: datetime | None
    enabled: bool


@dataclass
class RunRow:
    job: str
    slot: datetime
    trigger: str
    status: str
    attempt: int
    node: str
    epoch: int | None
    worker: str
    duration: timedelta | None
    note: str
    this_demo: bool  # created since the demo started (the database may hold older runs)


@dataclass
class NodeReport:
    node: str
    role: str
    epoch: int | None
    seen: datetime | None
    pid: int | None


@dataclass
class Snapshot:
    now: datetime
    leader: str | None = None
    lease_left: float | None = None
    epoch: int | None = None
    epoch_holder: str = ""
    acquired_at: datetime | None = None
    nodes: dict[str, NodeReport] = field(default_factory=dict)
    jobs: list[JobRow] = field(default_factory=list)
    runs: list[RunRow] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    redis_error: str = ""
    db_error: str = ""


def read(since: datetime) -> Snapshot:
    """The cluster now; ``counts`` are runs created since ``since`` (the demo's start)."""
    now = timezone.now()
    try:
        status = cluster_status(now)
    except DatabaseError as exc:
        return Snapshot(now=now, db_error=_one_line(exc))
    snap = Snapshot(
        now=now,
        leader=status.leader_node,
        lease_left=status.lease_left,
        epoch=status.epoch,
        epoch_holder=status.epoch_holder,
        acquired_at=status.acquired_at,
        redis_error=status.redis_error,
    )
    for report in status.nodes:
        node = str(report.get("node", "?"))
        snap.nodes[node] = NodeReport(
            node=node,
            role=str(report.get("role", "?")),
            epoch=report.get("epoch"),
            seen=parse_datetime(str(report.get("seen") or "")),
            pid=report.get("pid"),
        )
    try:
        snap.jobs = [_job_row(job) for job in JobDefinition.objects.order_by("next_run_at", "name")]
        runs = JobRun.objects.select_related("job").order_by("-scheduled_for", "-pk")
        snap.runs = [_run_row(run, since) for run in runs[:RECENT_RUNS]]
        snap.counts = dict(
            JobRun.objects.filter(created_at__gte=since)
            .values_list("status")
            .annotate(n=Count("pk"))
            .order_by()
        )
    except DatabaseError as exc:
        snap.db_error = _one_line(exc)
    return snap


def _job_row(job: JobDefinition) -> JobRow:
    return JobRow(
        name=job.name,
        schedule=describe(job.cron),
        timezone=job.timezone,
        next_run_at=job.next_run_at,
        enabled=job.enabled,
    )


def _run_row(run: JobRun, since: datetime) -> RunRow:
    note = run.error.splitlines()[0] if run.error else run.reason
    return RunRow(
        job=run.job.name,
        slot=run.scheduled_for,
        trigger=run.trigger,
        status=run.status,
        attempt=run.attempt,
        node=run.dispatched_by,
        epoch=run.epoch,
        worker=run.worker,
        duration=run.duration,
        note=note,
        this_demo=run.created_at >= since,
    )


@dataclass
class Takeover:
    """What a new leader did first: its first dispatch, and the slots it found owed."""

    epoch: int
    job: str
    slot: datetime
    sent_at: datetime
    late: int  # slots due before the takeover that it ran (late, or as catch-up)
    missed: int  # slots recorded as missed (the catch-up policy said not to run them)


def takeover(epoch: int, acquired_at: datetime) -> Takeover | None:
    """The first dispatch under ``epoch``, or None while there has been none."""
    runs = JobRun.objects.filter(epoch=epoch)
    first = runs.filter(queued_at__isnull=False).select_related("job").order_by("queued_at").first()
    if first is None or first.queued_at is None:
        return None
    decided = [RunStatus.MISSED, RunStatus.SKIPPED]
    late = runs.filter(scheduled_for__lt=acquired_at).exclude(status__in=decided).count()
    return Takeover(
        epoch=epoch,
        job=first.job.name,
        slot=first.scheduled_for,
        sent_at=first.queued_at,
        late=late,
        missed=runs.filter(status=RunStatus.MISSED).count(),
    )


def run_count(**filters: Any) -> int:
    return int(JobRun.objects.filter(**filters).count())


def slots_between(job_name: str, start: datetime, end: datetime) -> list[datetime]:
    """The slots of the job named ``job_name`` after ``start`` up to ``end``."""
    job = JobDefinition.objects.get(name=job_name)
    slots = []
    for slot in job.schedule.fire_times(start, 1000):
        if slot > end:
            break
        slots.append(slot)
    return slots


def recorded_slots(job_name: str, slots: list[datetime]) -> int:
    """How many of ``slots`` of the job have a run (whatever its status)."""
    return run_count(job__name=job_name, scheduled_for__in=slots)


def finished_slots(job_name: str, slots: list[datetime]) -> int:
    """How many of ``slots`` of the job have a run that ended (succeeded, failed or missed)."""
    ended = [RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.MISSED]
    return run_count(job__name=job_name, scheduled_for__in=slots, status__in=ended)


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())}"[:200]
