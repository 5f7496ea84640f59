"""The job definitions operators manage: a schedule in a time zone, a task and its policies."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import ClassVar, cast

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from .. import validation
from ..conf import app_settings
from ..core.catchup import CatchupPolicy as CorePolicy
from ..core.catchup import CatchupRules
from ..core.errors import ScheduleError
from ..core.kinds import Schedule
from ..core.schedules import parse_schedule
from ..core.slots import task_id_for
from ..core.timing import SlotTiming
from ..validation import LIVE_NAME_TAKEN, MAX_JITTER, PRIORITY_RANGE
from . import choices as policies
from . import helptexts
from .job_rules import JobRules
from .job_saving import JobSaving
from .job_saving import next_due_after as next_due_after  # the scheduler's recording imports it
from .pieces import JobPieces
from .retention import JobRetention


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


def exclusion_rules(job: JobDefinition) -> tuple[str, ...]:
    """The job's exclusions as the schedule parser's cache key; ``ScheduleError`` for a value
    that is not a list of text (bad data saved without ``full_clean()``)."""
    rules = job.exclusions
    if rules in (None, ""):
        return ()
    if not isinstance(rules, list) or not all(isinstance(rule, str) for rule in rules):
        raise ScheduleError("exclusions", f"exclusions must be a list of text, got {rules!r}.")
    return tuple(rules)


class JobDefinition(JobRules, JobSaving, JobPieces, JobRetention):
    name = models.CharField(max_length=200, help_text="Unique name operators know the job by.")
    description = models.TextField(blank=True)
    cron = models.CharField(max_length=200, verbose_name="schedule", help_text=helptexts.CRON)
    timezone = models.CharField(
        max_length=64, default="UTC", help_text="IANA time zone name, e.g. Europe/Berlin."
    )
    exclusions = models.JSONField(default=list, blank=True, help_text=helptexts.EXCLUSIONS)
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
        help_text=helptexts.OVERLAP_POLICY,
    )
    max_buffered = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100_000)],
        help_text=helptexts.MAX_BUFFERED,
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
        help_text=helptexts.ON_WORKER_LOST,
    )
    on_uncertain = models.CharField(
        max_length=8,
        choices=policies.UncertainPolicy.choices,
        default=policies.UncertainPolicy.SKIP,
        # Rows an earlier release's web or scheduler inserts during a rolling upgrade.
        db_default=str(policies.UncertainPolicy.SKIP),
        help_text=helptexts.ON_UNCERTAIN,
    )
    cancel_interrupts = models.BooleanField(
        default=False,
        db_default=False,  # rows an earlier release's web or scheduler inserts
        help_text=helptexts.CANCEL_INTERRUPTS,
    )
    cancel_grace = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(86_400)],
        help_text=helptexts.CANCEL_GRACE,
    )
    soft_time_limit = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text=helptexts.SOFT_LIMIT
    )
    time_limit = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text=helptexts.TIME_LIMIT
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
        help_text=helptexts.MAX_RUNS,
    )
    jitter = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(MAX_JITTER)], help_text=helptexts.JITTER
    )
    pause_after_failures = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text=helptexts.PAUSE_AFTER_FAILURES,
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

    @property
    def buffer_limit(self) -> int:
        """How many runs of a ``buffer_all`` job may wait their turn (its own, or the
        project's ``MAX_BUFFERED``)."""
        return self.max_buffered or app_settings.MAX_BUFFERED

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

    # -- operator actions ------------------------------------------------------------------

    @property
    def code_owned(self) -> str:
        """Why a field of a job declared in code is not changed here ("" for another job)."""
        if self.source != "code":
            return ""
        return f"Defined in code at {self.code_origin}: change it there and run sync_jobs."

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
