"""Runs their job's overlap policy holds back (``buffered``): released one at a time, in slot
order, once the runs ahead of them have ended; aged out past the job's catch-up window; dropped
when the job is paused (its slots; an operator's runs of it still run) or deleted. And, for
``cancel_other`` and ``terminate_other``, what a new slot does to the runs ahead of it
(:func:`preempt`).

Releasing takes the job's row lock, so the worker that ended a run and the leader's sweep that
found a buffer with nothing running ahead of it never release two runs of one job at once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from ..core.overlap import BUFFERING, OverlapPolicy, superseded
from ..dbtime import DbNow
from ..models import (
    ACTIVE_STATUSES,
    SCHEDULED_TRIGGERS,
    WAITING_STATUSES,
    JobDefinition,
    JobRun,
    RunStatus,
)
from .transitions import REASON_LIMIT, stop_requester


@dataclass
class Released:
    """What a release did: the runs made ``pending`` (to send now), and the job names of the
    buffered runs it recorded ``missed`` (aged past the catch-up window) and ``skipped`` (their
    job was paused or deleted)."""

    runs: list[JobRun] = field(default_factory=list)
    aged: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)


def buffering_jobs() -> list[int]:
    """The jobs that have runs held back (the leader's sweep releases what it can of them)."""
    held = JobRun.objects.filter(status=RunStatus.BUFFERED).order_by()
    return sorted(set(held.values_list("job_id", flat=True)))


def depths() -> dict[str, int]:
    """How many runs each job holds back, by job name (the buffer depth gauge)."""
    held = JobRun.objects.filter(status=RunStatus.BUFFERED).order_by()
    return dict(Counter(held.values_list("job__name", flat=True)))


def release(job_ids: list[int], *, now: datetime) -> Released:
    """For each job: age out and drop what must go, then, if nothing of the job is active ahead
    of its oldest buffered run, make that run ``pending`` (due now: it waited by policy, not
    late) and return it to be sent."""
    released = Released()
    for job_id in job_ids:
        with transaction.atomic():
            job = JobDefinition.all_objects.select_for_update().filter(pk=job_id).first()
            if job is not None:
                _release_one(job, now, released)
    return released


def _release_one(job: JobDefinition, now: datetime, released: Released) -> None:
    held = JobRun.objects.filter(job_id=job.pk, status=RunStatus.BUFFERED)
    if not job.enabled or job.deleted_at is not None:
        # A paused job's held slots go (as Temporal's pause drops buffered starts); an
        # operator's runs of it (run now, backfill) still run. A deleted job's all go.
        state = "deleted" if job.deleted_at is not None else "paused"
        dropping = held if state == "deleted" else held.filter(trigger__in=SCHEDULED_TRIGGERS)
        released.dropped[job.name] += dropping.update(
            status=RunStatus.SKIPPED,
            reason=f"its job was {state} while it waited its turn",
            finished_at=DbNow(),
        )
        if state == "deleted":
            return
    window = job.catchup_window
    aged = held.filter(scheduled_for__lt=now - window).update(
        status=RunStatus.MISSED,
        reason=f"waited its turn past the job's catch-up window ({window})"[:REASON_LIMIT],
        finished_at=DbNow(),
    )
    released.aged[job.name] += aged
    head = held.select_related("job").order_by("scheduled_for").first()
    if head is None:
        return
    ahead = JobRun.objects.filter(job_id=job.pk, status__in=ACTIVE_STATUSES)
    if OverlapPolicy(job.overlap_policy) not in BUFFERING:
        # Held back by an operator's override (a backfill's buffer_all): behind the runs of the
        # same trigger only; the job's own runs go by its own policy.
        ahead = ahead.filter(trigger=head.trigger)
    if ahead.exists():
        return
    if held.filter(pk=head.pk).update(status=RunStatus.PENDING, due_at=now):
        head.status, head.due_at = RunStatus.PENDING, now
        released.runs.append(head)


@dataclass(frozen=True)
class Preempted:
    asked: int  # running runs asked to stop
    cancelled: int  # runs still waiting, cancelled
    superseded: int  # older buffered runs, skipped


def preempt(job: JobDefinition, slot: datetime, *, policy: str | None = None) -> Preempted:
    """A new run of ``job`` for ``slot`` waits behind the job's runs (``cancel_other``,
    ``terminate_other``): its running runs are asked to stop (``terminate_other``: the leader
    terminates them at once, where their pool can), runs of earlier slots still waiting are
    cancelled and older buffered ones superseded — the newest slot wins."""
    name = OverlapPolicy(policy or job.overlap_policy).value
    why = f"overlap policy '{name}': the slot {slot:%Y-%m-%d %H:%M:%S}Z takes its place"
    runs = JobRun.objects.filter(job_id=job.pk)
    asked = runs.filter(status=RunStatus.RUNNING, cancel_requested_at__isnull=True).update(
        cancel_requested_at=DbNow(),
        cancel_requested_by=stop_requester(name),
        reason=why[:REASON_LIMIT],
    )
    earlier = runs.filter(scheduled_for__lt=slot)
    cancelled = earlier.filter(status__in=WAITING_STATUSES).update(
        status=RunStatus.CANCELLED, reason=why[:REASON_LIMIT], finished_at=DbNow()
    )
    skipped = earlier.filter(status=RunStatus.BUFFERED).update(
        status=RunStatus.SKIPPED,
        reason=superseded(name, f"{slot:%Y-%m-%d %H:%M:%S}Z")[:REASON_LIMIT],
        finished_at=DbNow(),
    )
    return Preempted(asked=asked, cancelled=cancelled, superseded=skipped)
