"""The job definitions operators manage: a schedule in a time zone, a task and its policies."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, ClassVar, cast

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, router, transaction
from django.utils import timezone

from .. import validation
from ..core.catchup import CatchupPolicy as CorePolicy
from ..core.catchup import CatchupRules
from ..core.errors import ScheduleError
from ..core.kinds import Schedule
from ..core.schedules import parse_schedule
from ..core.slots import task_id_for
from ..core.timing import SlotTiming
from ..dbtime import database_now
from ..validation import LIVE_NAME_TAKEN, MAX_JITTER, PRIORITY_RANGE
from . import choices as policies
from . import helptexts
from .changes import record_save, stored_snapshot
from .fields import AHEAD_FIELDS, BOOKKEEPING_FIELDS, CLUSTER_FIELDS, SCHEDULE_FIELDS
from .runs import JobRun


class JobQuerySet(models.QuerySet["JobDefinition"]):
    def live(self) -> JobQuerySet:
        return cast(JobQuerySet, self.filter(deleted_at__isnull=True))

    def due(self, now: datetime) -> JobQuerySet:
        """Enabled, live jobs whose next slot has come — served by the ``due`` index."""
        return self.due_by(now, None)

    def due_by(self, now: datetime, horizon: datetime | None) -> JobQuerySet:
        """:meth:`due`, and with a ``horizon`` also the jobs the scheduler records ahead: of
        overlap policy ``allow``, due by then, with no instant recorded ahead yet (their
        watermark is not past now). Earliest first."""
        live = self.filter(enabled=True, deleted_at__isnull=True)
        if horizon is None or horizon <= now:
            due = live.filter(next_run_at__lte=now)
        else:
            # The range on next_run_at first, so the due index serves it in order.
            ahead = models.Q(overlap_policy=policies.OverlapPolicy.ALLOW) & (
                models.Q(last_scheduled_at__lte=now) | models.Q(last_scheduled_at__isnull=True)
            )
            due = live.filter(next_run_at__lte=horizon).filter(
                models.Q(next_run_at__lte=now) | ahead
            )
        return cast(JobQuerySet, due.order_by("next_run_at"))


class LiveJobManager(models.Manager.from_queryset(JobQuerySet)):  # type: ignore[misc]
    """The default manager: jobs that are not soft-deleted."""

    def get_queryset(self) -> JobQuerySet:
        return cast(JobQuerySet, super().get_queryset()).live()


def _changed(job: JobDefinition, loaded: dict[str, Any], fields: Sequence[str]) -> bool:
    return any(f not in loaded or getattr(job, f) != loaded[f] for f in fields)


class JobSave:
    """What one save of a job does besides writing its row, in the same transaction. The row is
    shared (the scheduler advances its bookkeeping, workers count failures), so the save writes
    only the fields it owns (:attr:`kwargs`: the model's ``save`` arguments); a changed schedule
    field restarts the schedule; a changed field a run recorded ahead depends on withdraws those
    runs (the leader plans them anew); the change goes to the job's audit trail."""

    def __init__(self, job: JobDefinition, kwargs: dict[str, Any]) -> None:
        self.job = job
        loaded: dict[str, Any] | None = getattr(job, "_loaded", None)
        self.adding = adding = job._state.adding
        job.deletion_id = 0 if job.deleted_at is None else (job.pk or 0)
        owned: set[str] = set()
        limit_set = job.max_runs is not None and loaded and loaded.get("max_runs", 0) is None
        if limit_set and not adding:  # a new run limit counts from the ledger
            job.scheduled_runs = JobRun.objects.scheduled_count(job.pk)
            owned.add("scheduled_runs")
        if job.enabled and loaded and loaded.get("enabled") is False:  # resumed
            job.consecutive_failures = 0
            owned.add("consecutive_failures")
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


def restart_schedule(job: JobDefinition, now: datetime | None = None) -> None:
    """Start owing slots from ``now`` (the database's clock, not this host's: a watermark from a
    host running ahead would mark slots decided before the scheduler saw them). Not saved."""
    if not job.is_scheduled:
        job.next_run_at = None
        return
    job.last_scheduled_at = now = now or database_now(router.db_for_write(type(job)))
    job.next_run_at = next_due_after(job, now)


def exclusion_rules(job: JobDefinition) -> tuple[str, ...]:
    """The job's exclusions as the schedule parser's cache key; ``ScheduleError`` for a value
    that is not a list of text (bad data saved without ``full_clean()``)."""
    rules = job.exclusions
    if rules in (None, ""):
        return ()
    if not isinstance(rules, list) or not all(isinstance(rule, str) for rule in rules):
        raise ScheduleError("exclusions", f"exclusions must be a list of text, got {rules!r}.")
    return tuple(rules)


def next_due_after(job: JobDefinition, moment: datetime) -> datetime | None:
    """The first due time after ``moment``; None for a row whose schedule cannot be parsed (bad
    data saved without ``full_clean()``): it stays out of the due index, ``clean()`` says why."""
    try:
        return job.timing().next_due_after(job.schedule, moment)
    except ScheduleError:
        return None


class JobDefinition(models.Model):
    name = models.CharField(max_length=200, help_text="Unique name operators know the job by.")
    description = models.TextField(blank=True)
    cron = models.CharField(
        max_length=200,
        verbose_name="schedule",
        help_text="Cron: 5 fields (minute hour day-of-month month day-of-week), an optional 6th "
        "for seconds, or an alias such as @daily, evaluated in the job's time zone. Or an "
        "interval, '@every 90s' (units d, h, m, s; counted from the start, else 1970-01-01 "
        "UTC), once, '@at 2026-12-24T18:00:00' (a wall time in the job's zone, or with an offset), "
        "or at a solar event, '@solar sunrise 48.1374 11.5755' (event, latitude, longitude).",
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text="IANA time zone name, e.g. Europe/Berlin."
    )
    exclusions = models.JSONField(
        default=list,
        blank=True,
        help_text="Dates the schedule does not fire on, by the local date in the job's zone: "
        "'2026-12-24', a range '2026-12-27..2026-12-31', public holidays 'holidays:DE-BY' "
        "(the holidays extra).",
    )
    task = models.CharField(max_length=200, help_text=helptexts.TASK)
    args = models.JSONField(default=list, blank=True, help_text="JSON list of positional args.")
    kwargs = models.JSONField(default=dict, blank=True, help_text="JSON object of keyword args.")
    enabled = models.BooleanField(
        default=True, help_text="Paused jobs keep their history; resuming does not catch up."
    )
    pause_note = models.CharField(
        max_length=255, blank=True, help_text="Why the job is paused (shown in the jobs list)."
    )

    queue = models.CharField(max_length=200, blank=True, help_text=helptexts.QUEUE)
    priority = models.SmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(PRIORITY_RANGE[0]), MaxValueValidator(PRIORITY_RANGE[1])],
        help_text=helptexts.PRIORITY,
    )
    expires = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Seconds after its slot a run's message is discarded if no worker took it.",
    )

    catchup_policy = models.CharField(
        max_length=16,
        choices=policies.CatchupPolicy.choices,
        default=policies.default_catchup_policy,
    )
    catchup_window = helptexts.WindowField(
        default=policies.default_catchup_window, help_text=helptexts.CATCHUP_WINDOW
    )
    overlap_policy = models.CharField(
        max_length=16,
        choices=policies.OverlapPolicy.choices,
        default=policies.default_overlap_policy,
    )

    max_retries = models.PositiveSmallIntegerField(
        default=0, validators=[MaxValueValidator(100)], help_text="Retries after a failure."
    )
    retry_backoff = models.FloatField(
        default=10.0,
        validators=[MinValueValidator(0.0)],
        help_text="Seconds before the first retry; doubles each attempt (with jitter).",
    )
    retry_backoff_max = models.FloatField(
        default=600.0, validators=[MinValueValidator(0.0)], help_text="Upper bound, seconds."
    )
    on_worker_lost = models.CharField(
        max_length=8,
        choices=policies.WorkerLostPolicy.choices,
        default=policies.WorkerLostPolicy.RETRY,
        help_text="When the worker running this job dies mid-run: 'retry' runs it again as the "
        "next attempt if retries remain (the body may run twice: make it idempotent); 'fail' "
        "records the run failed and never runs it again.",
    )
    on_uncertain = models.CharField(
        max_length=8,
        choices=policies.UncertainPolicy.choices,
        default=policies.UncertainPolicy.SKIP,
        # Rows an earlier release's web or scheduler inserts during a rolling upgrade.
        db_default="skip",
        help_text="When the database fails over to a server that had not received its last "
        "writes, a slot of those seconds may have run without the ledger knowing: 'skip' "
        "records it uncertain and never runs it again; 'run' runs it (it may run twice).",
    )
    soft_time_limit = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="Seconds."
    )
    time_limit = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="Hard limit, seconds."
    )

    # Policies (docs/how-to/policies.md).
    start_at = models.DateTimeField(
        null=True, blank=True, help_text="No slot before this instant (empty: from now)."
    )
    end_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="No slot after this instant; past it the job is finished.",
    )
    max_runs = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Finish after this many scheduled runs (runs the scheduler dispatched; "
        "manual runs and backfills do not count). Empty: no limit.",
    )
    jitter = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(MAX_JITTER)],
        help_text="Seconds: each slot is dispatched up to this much after its time, by an offset "
        "fixed per job and slot, so many jobs on one cron do not all fire at once. The run keeps "
        "its slot.",
    )
    pause_after_failures = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text="Pause the job after this many failed runs in a row (retries exhausted). "
        "Empty: never.",
    )
    # How many runs the scheduler dispatched while ``max_runs`` is set (from the ledger when the
    # limit is set, then counted as it dispatches, so pruning old runs does not reset it).
    scheduled_runs = models.PositiveIntegerField(default=0, editable=False)
    # Failed runs in a row (retries exhausted), kept while ``pause_after_failures`` is set; a
    # success or a resume resets it.
    consecutive_failures = models.PositiveIntegerField(default=0, editable=False)

    # Scheduler bookkeeping. ``last_scheduled_at`` is the watermark: every slot at or before it
    # has been decided (run, missed or skipped). It is set to "now" whenever the schedule
    # (re)starts, so slots before a job existed or while it was paused are never owed.
    next_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_scheduled_at = models.DateTimeField(null=True, blank=True, editable=False)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    deleted_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Where the job is defined: "admin" (the admin or the API) or "code" (a declaration synced
    # by sync_jobs; its code-owned fields are read-only in the admin).
    source = models.CharField(
        max_length=8,
        choices=[("admin", "admin"), ("code", "code")],
        default="admin",
        editable=False,
    )
    code_origin = models.CharField(
        max_length=255, blank=True, editable=False, help_text="Where code declares the job."
    )
    # 0 while the job is live, its own id once soft-deleted: with the name, one unique constraint
    # that keeps live names unique on every database (MySQL/MariaDB have no conditional ones).
    deletion_id = models.BigIntegerField(default=0, editable=False)

    objects = LiveJobManager()
    all_objects = JobQuerySet.as_manager()

    # The values of AHEAD_FIELDS as loaded or last saved: what a save compares with.
    _loaded: dict[str, Any]

    class Meta:
        verbose_name = "job"
        ordering: ClassVar = ["name"]
        base_manager_name = "all_objects"
        permissions: ClassVar = [
            ("pause_jobdefinition", "Can pause and resume jobs"),
            ("run_jobdefinition", "Can run jobs now"),
            ("backfill_jobdefinition", "Can backfill jobs over a past range"),
            ("softdelete_jobdefinition", "Can soft-delete and restore jobs"),
        ]
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["name", "deletion_id"],
                name="cluster_cron_job_live_name_unique",
                violation_error_message=LIVE_NAME_TAKEN,
            ),
        ]
        # Paused and deleted jobs have no next_run_at, so a plain index (every database has
        # them) serves the due query as a partial one would.
        indexes: ClassVar = [models.Index(fields=["next_run_at"], name="cluster_cron_job_due")]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save the fields this save owns, restart the schedule if a schedule field changed,
        withdraw runs recorded ahead under the old definition and record the change (JobSave)."""
        edit = JobSave(self, kwargs)
        with edit.applied():
            super().save(*args, **edit.kwargs)
        self.remember_loaded()

    @classmethod
    def from_db(
        cls, db: str | None, field_names: Collection[str], values: Collection[Any], **kwargs: Any
    ) -> JobDefinition:
        instance = cast(JobDefinition, super().from_db(db, field_names, values, **kwargs))
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

    # -- schedule --------------------------------------------------------------------------

    @property
    def schedule(self) -> Schedule:
        """The parsed schedule; raises ``ScheduleError`` if the row holds a bad schedule or zone.
        An interval counts from the job's ``start_at``."""
        return parse_schedule(self.cron, self.timezone, self.start_at, exclusion_rules(self))

    @property
    def is_scheduled(self) -> bool:
        return self.enabled and self.deleted_at is None and not self.runs_exhausted

    @property
    def runs_exhausted(self) -> bool:
        return self.max_runs is not None and self.scheduled_runs >= self.max_runs

    def timing(self) -> SlotTiming:
        """The job's active period and jitter, for the pure core. A jitter out of range can only
        be a form's refused input (the admin still previews the rest of it): none."""
        jitter = (
            self.jitter if isinstance(self.jitter, int) and 0 < self.jitter <= MAX_JITTER else 0
        )
        return SlotTiming(
            start_at=self.start_at,
            end_at=self.end_at,
            jitter=timedelta(seconds=jitter),
            # Only jitter needs the job's identity; without it, jobs of one cron share a plan.
            key=(self.pk or 0) if jitter else 0,
        )

    def finished_reason(self, now: datetime) -> str:
        """Why the job will never run again on its schedule, or "" (it is not finished)."""
        if self.runs_exhausted:
            return f"finished: ran {self.scheduled_runs} of {self.max_runs} scheduled runs"
        if self.end_at is not None and now > self.end_at:
            return f"finished: its end ({self.end_at:%Y-%m-%d %H:%M:%S}Z) has passed"
        try:
            last = self.schedule.last_fire()
        except ScheduleError:
            return ""
        decided = self.last_scheduled_at
        if last is not None and decided is not None and decided >= last:
            return f"finished: its one run was due at {last:%Y-%m-%d %H:%M:%S}Z"
        return ""

    def catchup_rules(self, limits: tuple[int, timedelta, int] | None = None) -> CatchupRules:
        """The job's catch-up rules; ``limits`` (cap, grace, missed record limit) saves reading
        the settings again for each job of a batch."""
        cap, grace, missed = limits or policies.catchup_limits()
        return CatchupRules(
            policy=CorePolicy(self.catchup_policy),
            window=self.catchup_window,
            cap=cap,
            grace=grace,
            missed_record_limit=missed,
        )

    def runtime_problem(self, rules_checked: bool = False) -> str | None:
        """What makes this row unusable for the scheduler or a worker, or None (see
        :func:`~django_cluster_cron.validation.runtime_problem`)."""
        return validation.runtime_problem(self, rules_checked=rules_checked)

    def task_id_for(self, slot: datetime) -> str:
        return task_id_for(self.pk, slot)

    # -- validation ------------------------------------------------------------------------

    # Fields full_clean() was told not to check (a form's fields that failed already).
    _clean_exclude: frozenset[str] = frozenset()

    def full_clean(self, exclude: Iterable[str] | None = None, *args: Any, **kwargs: Any) -> None:
        self._clean_exclude = frozenset(exclude or ())
        try:
            super().full_clean(set(self._clean_exclude), *args, **kwargs)
        finally:
            self._clean_exclude = frozenset()

    def clean(self) -> None:
        errors = validation.definition_errors(self, timezone.now())
        try:
            self.check_live_name()
        except ValidationError as exc:
            errors = {"name": [exc], **errors}
        # A field left out of the check (the form refused its input) holds no value worth
        # judging: its own error is the one to show, not "empty" for what was never set.
        errors = {name: found for name, found in errors.items() if name not in self._clean_exclude}
        if errors:
            raise ValidationError(errors)

    # Declarations are validated without the database (at `manage.py check`): they skip this.
    check_name_in_database = True

    def check_live_name(self) -> None:
        """No other live job has this name (one query; the database enforces it too)."""
        if self.deleted_at is not None or not self.name or not self.check_name_in_database:
            return
        taken = JobDefinition.all_objects.filter(name=self.name, deleted_at__isnull=True)
        if taken.exclude(pk=self.pk).exists():
            raise ValidationError(LIVE_NAME_TAKEN, code="unique")

    def validate_constraints(self, exclude: Collection[str] | None = None) -> None:
        # The live-name constraint is checked by clean(), on the name field, with one query.
        super().validate_constraints(exclude={*(exclude or ()), "deletion_id"})

    # -- operator actions ------------------------------------------------------------------

    def pause(self, note: str = "") -> None:
        self.enabled = False
        self.pause_note = note[:255]
        self.save()

    def resume(self) -> None:
        """Resume from now on: slots that fell while paused are not caught up."""
        self.enabled = True
        self.pause_note = ""
        self.save()

    def soft_delete(self) -> None:
        self.deleted_at = timezone.now()
        self.save()

    def restore(self) -> None:
        self.deleted_at = None
        try:
            self.check_live_name()
        except ValidationError as exc:
            raise ValidationError({"name": exc.error_list}) from None
        self.save()
