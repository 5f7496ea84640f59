"""What a save of a job does around writing its row: the fields it owns, the schedule it restarts,
the runs recorded ahead it withdraws, the change it records (:class:`JobSave`), and the values it
compares the next save with (:class:`JobSaving`, a base of ``JobDefinition``)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.db import models, router, transaction

from .. import signals
from ..core.errors import ScheduleError
from ..dbtime import database_now
from .changes import record_save, stored_snapshot
from .fields import AHEAD_FIELDS, BOOKKEEPING_FIELDS, CLUSTER_FIELDS, SCHEDULE_FIELDS
from .runs import JobRun

if TYPE_CHECKING:
    from ..core.kinds import Schedule
    from ..core.timing import SlotTiming

_Job = TypeVar("_Job", bound="JobSaving")


class JobSaving(models.Model):
    """``JobDefinition``'s save (:class:`JobSave` does what it does besides writing the row) and
    the values a save compares with: as loaded, reloaded or last saved."""

    if TYPE_CHECKING:  # JobDefinition's fields and methods that the bookkeeping reads and sets
        enabled: bool
        deleted_at: datetime | None
        deletion_id: int
        max_runs: int | None
        scheduled_runs: int
        consecutive_failures: int
        next_run_at: datetime | None
        last_scheduled_at: datetime | None

        @property
        def schedule(self) -> Schedule: ...

        @property
        def is_scheduled(self) -> bool: ...

        def timing(self) -> SlotTiming: ...

    # The values of AHEAD_FIELDS as loaded or last saved: what a save compares with.
    _loaded: dict[str, Any]

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save the fields this save owns, restart the schedule if a schedule field changed,
        withdraw runs recorded ahead under the old definition and record the change (JobSave)."""
        edit = JobSave(self, kwargs)
        with edit.applied():
            super().save(*args, **edit.kwargs)
        self.remember_loaded()
        if edit.resumed:
            missed = slots_between(self, edit.paused_since, edit.now) if edit.now else 0
            signals.send_job(signals.job_resumed, self, slots_not_run=missed)

    @classmethod
    def from_db(
        cls: type[_Job],
        db: str | None,
        field_names: Collection[str],
        values: Collection[Any],
        **kwargs: Any,
    ) -> _Job:
        instance = cast(_Job, super().from_db(db, field_names, values, **kwargs))
        instance.remember_loaded(field_names)
        return instance

    def remember_loaded(self, field_names: Collection[str] = AHEAD_FIELDS) -> None:
        """Take these fields' values as the ones loaded (of the schedule fields among them), for
        a later save to compare with."""
        loaded = {f: getattr(self, f) for f in AHEAD_FIELDS if f in field_names}
        self._loaded = {**getattr(self, "_loaded", {}), **loaded}

    def refresh_from_db(
        self, using: str | None = None, fields: Any = None, *args: Any, **kwargs: Any
    ) -> None:
        """Reload from the database and take the reloaded values as the ones loaded, so a later
        save compares with them (a resume after a reload restarts the schedule)."""
        super().refresh_from_db(using, fields, *args, **kwargs)
        self.remember_loaded(AHEAD_FIELDS if fields is None else fields)


def _changed(job: JobSaving, loaded: dict[str, Any], fields: Sequence[str]) -> bool:
    return any(f not in loaded or getattr(job, f) != loaded[f] for f in fields)


class JobSave:
    """What one save of a job does besides writing its row, in the same transaction. The row is
    shared (the scheduler advances its bookkeeping, workers count failures), so the save writes
    only the fields it owns (:attr:`kwargs`: the model's ``save`` arguments); a changed schedule
    field restarts the schedule; a changed field a run recorded ahead depends on withdraws those
    runs (the leader plans them anew); the change goes to the job's audit trail."""

    def __init__(self, job: JobSaving, kwargs: dict[str, Any]) -> None:
        self.job = job
        loaded: dict[str, Any] | None = getattr(job, "_loaded", None)
        self.adding = adding = job._state.adding
        job.deletion_id = 0 if job.deleted_at is None else (job.pk or 0)
        owned: set[str] = set()
        limit_set = job.max_runs is not None and loaded and loaded.get("max_runs", 0) is None
        if limit_set and not adding:  # a new run limit counts from the ledger
            job.scheduled_runs = JobRun.objects.scheduled_count(job.pk)
            owned.add("scheduled_runs")
        self.resumed = bool(job.enabled and loaded and loaded.get("enabled") is False)
        if self.resumed:
            job.consecutive_failures = 0
            owned.add("consecutive_failures")
        # The slots that fell while it was paused (counted before the restart moves the
        # watermark): the job_resumed signal says how many were not run.
        self.paused_since = job.last_scheduled_at if self.resumed else None
        self.using: str = kwargs.get("using") or router.db_for_write(type(job), instance=job)
        self.restarted = adding or loaded is None or _changed(job, loaded, SCHEDULE_FIELDS)
        self.withdraw = not adding and (loaded is None or _changed(job, loaded, AHEAD_FIELDS))
        # One reading of the database's clock serves the restart and the withdrawal.
        self.now = database_now(self.using) if self.restarted or self.withdraw else None
        if self.restarted:
            restart_schedule(job, self.now)
            owned.update(BOOKKEEPING_FIELDS)
        self.kwargs = dict(kwargs)
        if kwargs.get("update_fields") is not None:
            self.kwargs["update_fields"] = {*kwargs["update_fields"], *owned}
        elif not adding:
            self.kwargs["update_fields"] = [
                f.name
                for f in job._meta.concrete_fields
                if not f.primary_key and (f.name not in CLUSTER_FIELDS or f.name in owned)
            ]

    @contextmanager
    def applied(self) -> Iterator[None]:
        """The transaction the row is written in (the ``with`` body), with what follows it."""
        with transaction.atomic(using=self.using):
            before = None if self.adding else stored_snapshot(self.job)
            yield
            if self.withdraw and self.now is not None:
                self._withdraw_recorded_ahead(self.now)
            record_save(self.job, before)

    def _withdraw_recorded_ahead(self, now: datetime) -> None:
        """A restarted schedule owes slots from ``now`` on (the restart set it); otherwise the
        watermark goes back to ``now`` if it was ahead, so the withdrawn slots are planned again
        under the new routing and policy."""
        job, using = self.job, self.using
        if not JobRun.objects.withdraw_recorded_ahead(job.pk, after=now, using=using):
            return
        rows = type(job)._base_manager.using(using).filter(pk=job.pk)
        if not self.restarted:
            next_run = next_due_after(job, now) if job.is_scheduled else None
            rows.filter(last_scheduled_at__gt=now).update(
                last_scheduled_at=now, next_run_at=next_run
            )
        if job.max_runs is not None:  # the withdrawn runs no longer count
            job.scheduled_runs = JobRun.objects.scheduled_count(job.pk)
            rows.update(scheduled_runs=job.scheduled_runs)


# A resume counts at most this many slots that fell while the job was paused.
PAUSED_COUNT_LIMIT = 100_000


def slots_between(job: JobSaving, after: datetime | None, until: datetime) -> int:
    """How many slots of the job's schedule fell in ``(after, until]`` (at most
    ``PAUSED_COUNT_LIMIT``): what a pause kept from running."""
    if after is None or not job.is_scheduled:
        return 0
    count = 0
    try:
        for slot in job.schedule.iter_after(after):
            if slot > until or count >= PAUSED_COUNT_LIMIT:
                break
            count += 1
    except ScheduleError:
        return 0
    return count


def restart_schedule(job: JobSaving, now: datetime | None = None) -> None:
    """Start owing slots from ``now`` (the database's clock, not this host's: a watermark from a
    host running ahead would mark slots decided before the scheduler saw them). Not saved."""
    if not job.is_scheduled:
        job.next_run_at = None
        return
    job.last_scheduled_at = now = now or database_now(router.db_for_write(type(job)))
    job.next_run_at = next_due_after(job, now)


def next_due_after(job: JobSaving, moment: datetime) -> datetime | None:
    """The first due time after ``moment``; None for a row whose schedule cannot be parsed (bad
    data saved without ``full_clean()``): it stays out of the due index, ``clean()`` says why."""
    try:
        return job.timing().next_due_after(job.schedule, moment)
    except ScheduleError:
        return None
