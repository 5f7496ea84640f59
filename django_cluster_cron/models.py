"""The job definitions operators manage and the run ledger the scheduler and workers write."""

from __future__ import annotations

import functools
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any, ClassVar, cast

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from . import validation
from .conf import app_settings
from .core.catchup import CatchupPolicy as CorePolicy
from .core.catchup import CatchupRules
from .core.cron import CronSchedule
from .core.errors import ScheduleError
from .core.slots import task_id_for


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


class JobQuerySet(models.QuerySet["JobDefinition"]):
    def live(self) -> JobQuerySet:
        return cast(JobQuerySet, self.filter(deleted_at__isnull=True))

    def due(self, now: datetime) -> JobQuerySet:
        """Enabled, live jobs whose next slot has come — served by the ``due`` partial index."""
        due = self.filter(enabled=True, deleted_at__isnull=True, next_run_at__lte=now)
        return cast(JobQuerySet, due.order_by("next_run_at"))


class LiveJobManager(models.Manager["JobDefinition"]):
    """The default manager: jobs that are not soft-deleted."""

    def get_queryset(self) -> JobQuerySet:
        return JobQuerySet(self.model, using=self._db).live()

    def due(self, now: datetime) -> JobQuerySet:
        return self.get_queryset().due(now)


# The schedule-defining fields: a change to any of them restarts the job's schedule from now.
SCHEDULE_FIELDS = ("cron", "timezone", "enabled", "deleted_at")
BOOKKEEPING_FIELDS = ("next_run_at", "last_scheduled_at")


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

    # Scheduler bookkeeping. ``last_scheduled_at`` is the watermark: every slot at or before it
    # has been decided (run, missed or skipped). It is set to "now" whenever the schedule
    # (re)starts, so slots before a job existed or while it was paused are never owed.
    next_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_scheduled_at = models.DateTimeField(null=True, blank=True, editable=False)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    deleted_at = models.DateTimeField(null=True, blank=True, editable=False)

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
                fields=["name"],
                condition=Q(deleted_at__isnull=True),
                name="cluster_cron_job_name_unique",
                violation_error_message="A job with this name already exists.",
            ),
        ]
        indexes: ClassVar = [
            models.Index(
                fields=["next_run_at"],
                condition=Q(enabled=True, deleted_at__isnull=True),
                name="cluster_cron_job_due",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    # -- persistence -----------------------------------------------------------------------

    def save(self, *args: Any, **kwargs: Any) -> None:
        update_fields = kwargs.get("update_fields")
        if self._schedule_changed():
            self.restart_schedule()
            if update_fields is not None:
                kwargs["update_fields"] = {*update_fields, *BOOKKEEPING_FIELDS}
        elif update_fields is None and not self._state.adding:
            # An edit that leaves the schedule alone must not write back the bookkeeping it
            # loaded earlier: the scheduler may have advanced it since.
            kwargs["update_fields"] = [
                f.name
                for f in self._meta.concrete_fields
                if not f.primary_key and f.name not in BOOKKEEPING_FIELDS
            ]
        super().save(*args, **kwargs)
        self._loaded = {f: getattr(self, f) for f in SCHEDULE_FIELDS}

    # -- change tracking ------------------------------------------------------------------

    @classmethod
    def from_db(
        cls, db: str | None, field_names: Collection[str], values: Collection[Any], **kwargs: Any
    ) -> JobDefinition:
        instance = cast(JobDefinition, super().from_db(db, field_names, values, **kwargs))
        instance._loaded = {f: getattr(instance, f) for f in SCHEDULE_FIELDS if f in field_names}
        return instance

    def _schedule_changed(self) -> bool:
        loaded = getattr(self, "_loaded", None)
        if self._state.adding or loaded is None:
            return True
        return any(getattr(self, f) != loaded.get(f, object()) for f in SCHEDULE_FIELDS)

    # -- schedule --------------------------------------------------------------------------

    @property
    def schedule(self) -> CronSchedule:
        """The parsed schedule; raises ``ScheduleError`` if the row holds a bad cron or zone."""
        return parse_schedule(self.cron, self.timezone)

    @property
    def is_scheduled(self) -> bool:
        return self.enabled and self.deleted_at is None

    def catchup_rules(self) -> CatchupRules:
        return CatchupRules(
            policy=CorePolicy(self.catchup_policy),
            window=self.catchup_window,
            cap=app_settings.CATCHUP_CAP,
            grace=app_settings.ON_TIME_GRACE,
            missed_record_limit=app_settings.MISSED_RECORD_LIMIT,
        )

    def runtime_problem(self) -> str | None:
        """What makes this row unusable for the scheduler or a worker, or None.

        Validation normally keeps bad data out; this catches what reached the table anyway (raw
        SQL, an old row, a manual edit), so that one job is reported and parked instead of
        breaking the batch it is in.
        """
        try:
            self.catchup_rules()
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
        now = now or timezone.now()
        self.last_scheduled_at = now
        try:
            self.next_run_at = self.schedule.next_after(now)
        except ScheduleError:
            # Unvalidated bad data (e.g. save() without full_clean()): keep it out of the
            # scheduler's due index instead of crashing the save; clean() reports the error.
            self.next_run_at = None

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

    def restore(self) -> None:
        self.deleted_at = None
        self.validate_constraints()
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


class JobRun(models.Model):
    """One slot of one job: the outbox row the leader publishes and the ledger of its fate."""

    job = models.ForeignKey(JobDefinition, on_delete=models.CASCADE, related_name="runs")
    scheduled_for = models.DateTimeField(help_text="The slot (UTC).")
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
        return f"{self.job_id} @ {self.scheduled_for:%Y-%m-%d %H:%M:%S}Z ({self.status})"


class SchedulerLease(models.Model):
    """The fencing epoch of the scheduler leadership (one row, ``name="leader"``).

    The Redis lease decides who *should* lead; this row decides whose writes *count*. Taking
    leadership increments ``epoch`` in a database transaction. Every leader transaction starts
    with a conditional ``UPDATE … WHERE epoch = <mine>`` on this row (see
    :meth:`django_cluster_cron.store.RunStore.fenced`): it fails once a newer leader has bumped
    the epoch, and while it holds the row lock a newer leader's bump waits for it to commit. So a
    paused leader that wakes up after its lease expired cannot record, advance or publish anything
    under its old epoch.
    """

    name = models.CharField(max_length=64, unique=True)
    epoch = models.BigIntegerField(default=0)
    holder = models.CharField(max_length=255, blank=True, help_text="Node id of the leader.")
    token = models.CharField(max_length=255, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    last_write_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "scheduler lease"

    def __str__(self) -> str:
        return f"{self.name}: epoch {self.epoch} held by {self.holder or 'nobody'}"


class ClusterStatus(SchedulerLease):
    """Proxy that puts the cluster status page in the admin index (no table of its own)."""

    class Meta:
        proxy = True
        verbose_name = "cluster status"
        verbose_name_plural = "cluster status"
        permissions: ClassVar = [("forcerelease_lock", "Can force-release cluster locks")]
