"""The job definitions operators manage and the run ledger the scheduler and workers write."""

from __future__ import annotations

import functools
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any, ClassVar, cast

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, router, transaction
from django.utils import timezone

from . import validation
from .conf import app_settings
from .core.catchup import CatchupPolicy as CorePolicy
from .core.catchup import CatchupRules
from .core.cron import CronSchedule
from .core.errors import ScheduleError
from .core.slots import task_id_for
from .core.timing import SlotTiming
from .dbtime import database_now


class CatchupPolicy(models.TextChoices):
    ALL = CorePolicy.ALL.value, "all — run every missed slot in the window (capped)"
    LATEST = CorePolicy.LATEST.value, "latest — run only the most recent missed slot"
    NONE = CorePolicy.NONE.value, "none — run only slots that are on time"


class OverlapPolicy(models.TextChoices):
    ALLOW = "allow", "allow — runs may overlap"
    SKIP = "skip", "skip — skip a slot while the previous run is queued or running"
    BUFFER_ONE = "buffer_one", "buffer one — keep at most one run waiting"


class WorkerLostPolicy(models.TextChoices):
    RETRY = "retry", "retry — run it again if retries remain (at-least-once)"
    FAIL = "fail", "fail — never run it again (at-most-once)"


def default_catchup_policy() -> str:
    return app_settings.CATCHUP_POLICY


def default_catchup_window() -> timedelta:
    return app_settings.CATCHUP_WINDOW


def default_overlap_policy() -> str:
    return app_settings.OVERLAP_POLICY


@functools.lru_cache(maxsize=4096)
def parse_schedule(cron: str, tz: str) -> CronSchedule:
    """Parsed schedules are immutable, so the scheduler can reuse them across ticks."""
    return CronSchedule.parse(cron, tz)


LIVE_NAME_TAKEN = "A job with this name already exists."
MAX_JITTER = 3600  # seconds


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
            ahead = models.Q(overlap_policy=OverlapPolicy.ALLOW) & (
                models.Q(last_scheduled_at__lte=now) | models.Q(last_scheduled_at__isnull=True)
            )
            due = live.filter(next_run_at__lte=horizon).filter(
                models.Q(next_run_at__lte=now) | ahead
            )
        return cast(JobQuerySet, due.order_by("next_run_at"))


class LiveJobManager(models.Manager["JobDefinition"]):
    """The default manager: jobs that are not soft-deleted."""

    def get_queryset(self) -> JobQuerySet:
        return JobQuerySet(self.model, using=self._db).live()

    def due(self, now: datetime) -> JobQuerySet:
        return self.get_queryset().due(now)

    def due_by(self, now: datetime, horizon: datetime | None) -> JobQuerySet:
        return self.get_queryset().due_by(now, horizon)


# The schedule-defining fields: a change to any of them restarts the job's schedule from now.
SCHEDULE_FIELDS = (
    "cron",
    "timezone",
    "enabled",
    "deleted_at",
    "start_at",
    "end_at",
    "jitter",
    "max_runs",
)
# What a run's message carries from its job (routing, expiry, limits) and the policy a run
# recorded ahead was decided under: with the schedule fields, a change to any of them withdraws
# the runs recorded ahead of their time (see withdraw_recorded_ahead).
AHEAD_FIELDS = (
    *SCHEDULE_FIELDS,
    "queue",
    "priority",
    "expires",
    "soft_time_limit",
    "time_limit",
    "overlap_policy",
)
BOOKKEEPING_FIELDS = ("next_run_at", "last_scheduled_at")
# Written by the scheduler and workers with conditional UPDATEs; a save writes them only when it
# sets them itself.
CLUSTER_FIELDS = (*BOOKKEEPING_FIELDS, "scheduled_runs", "consecutive_failures")


class JobDefinition(models.Model):
    name = models.CharField(max_length=200, help_text="Unique name operators know the job by.")
    description = models.TextField(blank=True)
    cron = models.CharField(
        max_length=200,
        help_text="5 fields (minute hour day-of-month month day-of-week), an optional 6th for "
        "seconds, or an alias such as @daily. Evaluated in the job's time zone.",
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text="IANA time zone name, e.g. Europe/Berlin."
    )
    task = models.CharField(max_length=200, help_text="Registered Celery task name.")
    args = models.JSONField(default=list, blank=True, help_text="JSON list of positional args.")
    kwargs = models.JSONField(default=dict, blank=True, help_text="JSON object of keyword args.")
    enabled = models.BooleanField(
        default=True, help_text="Paused jobs keep their history; resuming does not catch up."
    )
    pause_note = models.CharField(
        max_length=255, blank=True, help_text="Why the job is paused (shown in the jobs list)."
    )

    queue = models.CharField(
        max_length=200, blank=True, help_text="Celery queue; empty uses the project's routing."
    )
    priority = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(255)],
        help_text="Message priority (broker-specific range; RabbitMQ 0-255, Redis 0-9).",
    )
    expires = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Seconds after its slot a run's message is discarded if no worker took it.",
    )

    catchup_policy = models.CharField(
        max_length=16, choices=CatchupPolicy.choices, default=default_catchup_policy
    )
    catchup_window = models.DurationField(
        default=default_catchup_window,
        help_text="How far back missed slots are considered after an outage.",
    )
    overlap_policy = models.CharField(
        max_length=16, choices=OverlapPolicy.choices, default=default_overlap_policy
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
        choices=WorkerLostPolicy.choices,
        default=WorkerLostPolicy.RETRY,
        help_text="When the worker running this job dies mid-run: 'retry' runs it again as the "
        "next attempt if retries remain (the body may run twice: make it idempotent); 'fail' "
        "records the run failed and never runs it again.",
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

    # -- persistence -----------------------------------------------------------------------

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, restart the schedule if a schedule field changed, and record the change.

        The scheduler's bookkeeping and the counters the cluster keeps are written only when this
        save owns them (a restarted schedule, a new run limit, a resume), so an edit never writes
        back stale values the scheduler or a worker has advanced meanwhile.
        """
        from . import audit

        update_fields = kwargs.get("update_fields")
        adding = self._state.adding
        self.deletion_id = 0 if self.deleted_at is None else (self.pk or 0)
        owned: set[str] = set()
        if self._limit_set():
            self.scheduled_runs = self.counted_runs()
            owned.add("scheduled_runs")
        if self._resumed():
            self.consecutive_failures = 0
            owned.add("consecutive_failures")
        using = kwargs.get("using") or router.db_for_write(JobDefinition, instance=self)
        restarted = self._schedule_changed()
        withdraw = not adding and self._ahead_fields_changed()
        # One reading of the database's clock serves the restart and the withdrawal.
        now = database_now(using) if restarted or withdraw else None
        if restarted:
            self.restart_schedule(now)
            owned.update(BOOKKEEPING_FIELDS)
        if update_fields is not None:
            kwargs["update_fields"] = {*update_fields, *owned}
        elif not adding:
            kwargs["update_fields"] = [
                f.name
                for f in self._meta.concrete_fields
                if not f.primary_key and (f.name not in CLUSTER_FIELDS or f.name in owned)
            ]
        with transaction.atomic(using=using):
            before = None if adding else audit.stored_snapshot(self)
            super().save(*args, **kwargs)
            if withdraw and now is not None:
                self._withdraw_recorded_ahead(now, restarted, using)
            audit.record_save(self, before)
        self._loaded = {f: getattr(self, f) for f in AHEAD_FIELDS}

    def _withdraw_recorded_ahead(self, now: datetime, restarted: bool, using: str) -> None:
        """Runs recorded ahead under the old definition go; the leader plans them anew.

        A restarted schedule owes slots from ``now`` on (the restart set it); otherwise the
        watermark goes back to ``now`` if it was ahead of it, so the slots withdrawn are planned
        again under the new routing and policy.
        """
        from .scheduler.runs import withdraw_recorded_ahead

        if not withdraw_recorded_ahead(self.pk, after=now, using=using):
            return
        if not restarted:
            next_run = self._next_due_after(now) if self.is_scheduled else None
            JobDefinition.all_objects.using(using).filter(
                pk=self.pk, last_scheduled_at__gt=now
            ).update(last_scheduled_at=now, next_run_at=next_run)
        if self.max_runs is not None:  # the withdrawn runs no longer count
            self.scheduled_runs = self.counted_runs()
            JobDefinition.all_objects.using(using).filter(pk=self.pk).update(
                scheduled_runs=self.scheduled_runs
            )

    def _resumed(self) -> bool:
        loaded = getattr(self, "_loaded", None)
        return bool(self.enabled and loaded and loaded.get("enabled") is False)

    # -- change tracking ------------------------------------------------------------------

    @classmethod
    def from_db(
        cls, db: str | None, field_names: Collection[str], values: Collection[Any], **kwargs: Any
    ) -> JobDefinition:
        instance = cast(JobDefinition, super().from_db(db, field_names, values, **kwargs))
        instance._loaded = {f: getattr(instance, f) for f in AHEAD_FIELDS if f in field_names}
        return instance

    def refresh_from_db(
        self, using: str | None = None, fields: Any = None, *args: Any, **kwargs: Any
    ) -> None:
        """Reload from the database and take the reloaded values as the ones loaded, so a later
        save compares with them (a resume after a reload restarts the schedule)."""
        super().refresh_from_db(using, fields, *args, **kwargs)
        reloaded = AHEAD_FIELDS if fields is None else [f for f in AHEAD_FIELDS if f in fields]
        self._loaded = {**getattr(self, "_loaded", {}), **{f: getattr(self, f) for f in reloaded}}

    def _limit_set(self) -> bool:
        """``max_runs`` goes from no limit to one: its count starts from the ledger."""
        if self.max_runs is None or self._state.adding:
            return False
        loaded = getattr(self, "_loaded", None)
        return loaded is not None and "max_runs" in loaded and loaded["max_runs"] is None

    def counted_runs(self) -> int:
        """What ``max_runs`` counts, from the ledger: runs its schedule dispatched."""
        runs = JobRun.objects.filter(job_id=self.pk, trigger__in=SCHEDULED_TRIGGERS)
        return int(runs.exclude(status__in=(RunStatus.MISSED, RunStatus.SKIPPED)).count())

    def _schedule_changed(self) -> bool:
        loaded = getattr(self, "_loaded", None)
        if self._state.adding or loaded is None:
            return True
        return any(getattr(self, f) != loaded.get(f, object()) for f in SCHEDULE_FIELDS)

    def _ahead_fields_changed(self) -> bool:
        loaded = getattr(self, "_loaded", None)
        if loaded is None:
            return True
        return any(getattr(self, f) != loaded.get(f, object()) for f in AHEAD_FIELDS)

    # -- schedule --------------------------------------------------------------------------

    @property
    def schedule(self) -> CronSchedule:
        """The parsed schedule; raises ``ScheduleError`` if the row holds a bad cron or zone."""
        return parse_schedule(self.cron, self.timezone)

    @property
    def is_scheduled(self) -> bool:
        return self.enabled and self.deleted_at is None and not self.runs_exhausted

    @property
    def runs_exhausted(self) -> bool:
        return self.max_runs is not None and self.scheduled_runs >= self.max_runs

    def timing(self) -> SlotTiming:
        """The job's active period and jitter, for the pure core."""
        return SlotTiming(
            start_at=self.start_at,
            end_at=self.end_at,
            jitter=timedelta(seconds=self.jitter or 0),
            # Only jitter needs the job's identity; without it, jobs of one cron share a plan.
            key=(self.pk or 0) if self.jitter else 0,
        )

    def finished_reason(self, now: datetime) -> str:
        """Why the job will never run again on its schedule, or "" (it is not finished)."""
        if self.runs_exhausted:
            return f"finished: ran {self.scheduled_runs} of {self.max_runs} scheduled runs"
        if self.end_at is not None and now > self.end_at:
            return f"finished: its end ({self.end_at:%Y-%m-%d %H:%M:%S}Z) has passed"
        return ""

    def catchup_rules(self, limits: tuple[int, timedelta, int] | None = None) -> CatchupRules:
        """The job's catch-up rules; ``limits`` (cap, grace, missed record limit) saves reading
        the settings again for each job of a batch."""
        cap, grace, missed = limits or catchup_limits()
        return CatchupRules(
            policy=CorePolicy(self.catchup_policy),
            window=self.catchup_window,
            cap=cap,
            grace=grace,
            missed_record_limit=missed,
        )

    def runtime_problem(self, rules_checked: bool = False) -> str | None:
        """What makes this row unusable for the scheduler or a worker, or None.

        Validation normally keeps bad data out; this catches what reached the table anyway (raw
        SQL, an old row, a manual edit), so that one job is reported and parked instead of
        breaking the batch it is in. ``rules_checked``: the caller built its catch-up rules.
        """
        try:
            if not rules_checked:
                self.catchup_rules()
            self.timing()
            self.schedule  # noqa: B018 (parses cron and zone)
        except (ScheduleError, ValueError) as exc:
            return str(exc)
        private = validation.private_task_reason(self.task)
        if private:
            return private
        if self.overlap_policy not in OverlapPolicy.values:
            return f"unknown overlap policy {self.overlap_policy!r}"
        if not isinstance(self.args, list):
            return f"args must be a JSON list, the row holds {type(self.args).__name__}"
        if not isinstance(self.kwargs, dict) or not all(isinstance(k, str) for k in self.kwargs):
            return "kwargs must be a JSON object with string keys"
        return None

    def restart_schedule(self, now: datetime | None = None) -> None:
        """Start owing slots from ``now``: set the watermark and the next slot (not saved)."""
        if not self.is_scheduled:
            self.next_run_at = None
            return
        # The database's clock, not this host's (G7): a watermark from a host running ahead
        # would mark slots as decided before the scheduler has seen them.
        now = now or database_now(router.db_for_write(JobDefinition))
        self.last_scheduled_at = now
        self.next_run_at = self._next_due_after(now)

    def _next_due_after(self, moment: datetime) -> datetime | None:
        try:
            return self.timing().next_due_after(self.schedule, moment)
        except ScheduleError:
            # Unvalidated bad data (e.g. save() without full_clean()): keep it out of the
            # scheduler's due index instead of crashing the save; clean() reports the error.
            return None

    def task_id_for(self, slot: datetime) -> str:
        return task_id_for(self.pk, slot)

    # -- validation ------------------------------------------------------------------------

    def clean(self) -> None:
        errors: dict[str, list[ValidationError]] = {}

        def check(field: str, func: Any, *args: Any) -> None:
            try:
                func(*args)
            except ValidationError as exc:
                errors.setdefault(field, []).append(exc)

        check("name", self.check_live_name)
        check("cron", validation.clean_cron, self.cron)
        check("timezone", validation.clean_timezone, self.timezone)
        check("task", validation.clean_task_name, self.task)
        check("args", validation.clean_args, self.args)
        check("kwargs", validation.clean_kwargs, self.kwargs)
        check("queue", validation.clean_queue, self.queue)
        schedule = None
        if "cron" not in errors and "timezone" not in errors:
            schedule = self.schedule
        if self.catchup_window is not None:
            check(
                "catchup_window",
                validation.clean_catchup_window,
                schedule,
                self.catchup_window,
                timezone.now(),
            )
        if self.soft_time_limit and self.time_limit and self.soft_time_limit >= self.time_limit:
            errors.setdefault("soft_time_limit", []).append(
                ValidationError(
                    f"The soft time limit ({self.soft_time_limit} s) must be below the hard "
                    f"limit ({self.time_limit} s) so the task can clean up before it is killed."
                )
            )
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            errors.setdefault("end_at", []).append(
                ValidationError(
                    f"The end ({self.end_at:%Y-%m-%d %H:%M:%S %Z}) must be after the start "
                    f"({self.start_at:%Y-%m-%d %H:%M:%S %Z})."
                )
            )
        if (
            self.retry_backoff_max is not None
            and self.retry_backoff is not None
            and self.retry_backoff_max < self.retry_backoff
        ):
            errors.setdefault("retry_backoff_max", []).append(
                ValidationError("The maximum backoff must not be below the first backoff.")
            )
        if errors:
            raise ValidationError(errors)

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

    def restore(self) -> None:
        self.deleted_at = None
        try:
            self.check_live_name()
        except ValidationError as exc:
            raise ValidationError({"name": exc.error_list}) from None
        self.save()


class RunStatus(models.TextChoices):
    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    RETRYING = "retrying"
    MISSED = "missed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


ACTIVE_STATUSES = (RunStatus.PENDING, RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.RETRYING)
FINAL_STATUSES = (
    RunStatus.SUCCESS,
    RunStatus.FAILED,
    RunStatus.MISSED,
    RunStatus.SKIPPED,
    RunStatus.CANCELLED,
)


class RunTrigger(models.TextChoices):
    SCHEDULE = "schedule"
    CATCHUP = "catchup"
    MANUAL = "manual"
    BACKFILL = "backfill"


# The runs a job's schedule makes (what ``max_runs`` counts), as opposed to an operator's.
SCHEDULED_TRIGGERS = (RunTrigger.SCHEDULE, RunTrigger.CATCHUP)


def catchup_limits() -> tuple[int, timedelta, int]:
    """The project's catch-up cap, on-time grace and missed record limit (settings)."""
    return app_settings.CATCHUP_CAP, app_settings.ON_TIME_GRACE, app_settings.MISSED_RECORD_LIMIT


class JobRun(models.Model):
    """One slot of one job: the outbox row the leader publishes and the ledger of its fate."""

    job = models.ForeignKey(JobDefinition, on_delete=models.CASCADE, related_name="runs")
    scheduled_for = models.DateTimeField(help_text="The slot (UTC).")
    due_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When its message may be sent and the run started, no earlier (database time): "
        "the slot plus the job's jitter. Runs the scheduler recorded ahead wait for it; empty "
        "for runs an operator started.",
    )
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.PENDING)
    task_id = models.CharField(max_length=255, unique=True)
    trigger = models.CharField(max_length=16, choices=RunTrigger.choices)
    attempt = models.PositiveIntegerField(default=1)
    dispatched_by = models.CharField(max_length=255, blank=True, help_text="Scheduler node id.")
    epoch = models.BigIntegerField(null=True, blank=True, help_text="Leader fencing epoch.")
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration = models.DurationField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life from the worker running it."
    )
    retry_at = models.DateTimeField(
        null=True, blank=True, help_text="When the next attempt is due (status retrying)."
    )
    publish_count = models.PositiveIntegerField(
        default=0, help_text="How many times its message was sent to the broker."
    )
    republish_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="If no worker has started it by then, its message is sent again (the broker "
        "may have lost it); the wait doubles with every copy.",
    )
    worker = models.CharField(max_length=255, blank=True, help_text="Worker hostname and pid.")
    reason = models.CharField(
        max_length=255, blank=True, help_text="Why the run was missed, skipped or cancelled."
    )
    result = models.TextField(blank=True, help_text="Short repr of the task's return value.")
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "run"
        ordering: ClassVar = ["-scheduled_for"]
        permissions: ClassVar = [
            ("retry_jobrun", "Can retry failed runs"),
            ("cancel_jobrun", "Can cancel waiting runs"),
        ]
        get_latest_by = "scheduled_for"
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["job", "scheduled_for"], name="cluster_cron_run_one_per_slot"
            ),
        ]
        indexes: ClassVar = [
            models.Index(fields=["status", "scheduled_for"], name="cluster_cron_run_status"),
            models.Index(fields=["-scheduled_for"], name="cluster_cron_run_recent"),
            models.Index(fields=["trigger", "scheduled_for"], name="cluster_cron_run_trigger"),
        ]

    def __str__(self) -> str:
        """``Run 8 of nightly-report, slot 2026-11-23 12:25:17 UTC (queued)``: the run's own id
        first (the job's name when it is loaded, else its id)."""
        job = self.job.name if JobRun.job.is_cached(self) else f"job {self.job_id}"
        return (
            f"Run {self.pk} of {job}, slot {self.scheduled_for:%Y-%m-%d %H:%M:%S} UTC "
            f"({self.status})"
        )


class SchedulerLease(models.Model):
    """A named lease and its fencing epoch: ``leader`` (the scheduler's leadership), and with the
    database lease backend also ``lock:<name>`` (cluster locks).

    The ``leader`` row decides whose writes *count*. Taking leadership increments ``epoch``
    (with the Redis backend the scheduler does it after taking the Redis lease; with the
    database backend the acquiring UPDATE does it, see :mod:`django_cluster_cron.leases.database`)
    and writes the new holder's ``token``. Every leader transaction starts with a conditional
    ``UPDATE … WHERE epoch = <mine> AND token = <mine>`` on this row (see
    :meth:`django_cluster_cron.scheduler.store.RunStore.fenced`): it fails once a newer leader
    has taken over, and while it holds the row lock a newer leader's bump waits for it to
    commit. So a paused leader that wakes up after its lease expired cannot record, advance or
    publish anything under its old epoch.

    ``valid_until`` and ``ttl`` are used by the database lease backend only (database time).
    """

    name = models.CharField(max_length=255, unique=True)
    epoch = models.BigIntegerField(default=0)
    holder = models.CharField(max_length=255, blank=True, help_text="Node id of the holder.")
    token = models.CharField(max_length=255, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    last_write_at = models.DateTimeField(null=True, blank=True)
    valid_until = models.DateTimeField(
        null=True, blank=True, help_text="Database lease: held until (database time)."
    )
    ttl = models.DurationField(
        null=True, blank=True, help_text="Database lease: the time-to-live its holder asked for."
    )

    class Meta:
        verbose_name = "scheduler lease"

    def __str__(self) -> str:
        return f"{self.name}: epoch {self.epoch} held by {self.holder or 'nobody'}"


class JobSync(models.Model):
    """The last sync of the jobs declared in code (one row): which release, and what it held.

    A sync locks this row, so syncs from several hosts run one after another; one from an older
    ``JOBS_VERSION`` than ``version`` here is skipped, so two releases syncing in turn during a
    rolling deploy do not undo each other.
    """

    name = models.CharField(max_length=32, unique=True, default="jobs")
    version = models.BigIntegerField(null=True, blank=True)
    digest = models.CharField(max_length=64, blank=True)
    synced_at = models.DateTimeField(null=True, blank=True)
    synced_by = models.CharField(max_length=255, blank=True)

    class Meta:
        verbose_name = "declared jobs sync"

    def __str__(self) -> str:
        return f"jobs from code: version {self.version}, {self.synced_at}"


class JobChange(models.Model):
    """One change to a job: who made it, through what, which fields from what to what, and why.

    Written by :mod:`django_cluster_cron.audit` for every save of a job (the admin form and
    actions, the API, code sync, imports, your own code) and for the changes the cluster makes
    itself (a pause after repeated failures). The job's History page and the API read it.
    """

    job = models.ForeignKey(JobDefinition, on_delete=models.CASCADE, related_name="changes")
    at = models.DateTimeField(help_text="When (database time).")
    actor = models.CharField(
        max_length=150, blank=True, help_text='The user, or "code sync", "import", "policy".'
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    via = models.CharField(
        max_length=16, help_text="admin, api, code, import, policy or shell (your own code)."
    )
    action = models.CharField(max_length=32)
    changes = models.JSONField(
        default=dict, blank=True, help_text='{"field": [old, new]} for each field that changed.'
    )
    note = models.TextField(blank=True)

    class Meta:
        verbose_name = "job change"
        ordering: ClassVar = ["-at", "-pk"]
        indexes: ClassVar = [models.Index(fields=["job", "-at"], name="cluster_cron_change_job")]

    def __str__(self) -> str:
        who = self.actor or self.via
        return f"job {self.job_id} {self.action} by {who} at {self.at:%Y-%m-%d %H:%M:%S}Z"


class NodeReport(models.Model):
    """A scheduler node's latest status, for the cluster page (database lease backend).

    Each node updates its own row about every few seconds; rows expire a few TTLs after the node
    stops reporting and are pruned an hour later.
    """

    node = models.CharField(max_length=255, unique=True)
    payload = models.JSONField(default=dict)
    seen_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "scheduler node report"

    def __str__(self) -> str:
        return self.node


class ClusterCounter(models.Model):
    """A cluster-wide counter (database lease backend), e.g. duplicate deliveries dropped."""

    name = models.CharField(max_length=100, unique=True)
    value = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} = {self.value}"


class ClusterStatus(SchedulerLease):
    """Proxy that puts the cluster status page in the admin index (no table of its own)."""

    class Meta:
        proxy = True
        verbose_name = "cluster status"
        verbose_name_plural = "cluster status"
        permissions: ClassVar = [("forcerelease_lock", "Can force-release cluster locks")]
