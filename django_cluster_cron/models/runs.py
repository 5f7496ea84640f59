"""The run ledger: one ``JobRun`` row per slot of a job, and the states a run goes through.

How rows are made and move from state to state is :mod:`django_cluster_cron.ledger`; this module
is the table, its statuses and the groups of statuses the rest of the app reasons with.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from django.db import models

# Its lines have always been the scheduler's (logging configurations name it).
logger = logging.getLogger("django_cluster_cron.scheduler")

# The unique (job, slot) constraint and its index: a job's runs in slot order (MySQL/MariaDB are
# told to read it by name where they chose another, ``bulk.through_index``).
ONE_PER_SLOT = "cluster_cron_run_one_per_slot"


class RunStatus(models.TextChoices):
    """The states of a run, and who moves a run out of each, through which function (under
    ``django_cluster_cron.ledger``), into which state. Nothing else writes a run's status; the
    table is ``ledger.states.MOVES`` and the test suite holds the code to it::

        (recorded)  → pending, skipped   leader, operator  rows.new_run
        (recorded)  → buffered           leader, operator  rows.new_run
        (recorded)  → pending, skipped   leader            fastinsert.insert_ignoring_conflicts
        (recorded)  → buffered           leader            fastinsert.insert_ignoring_conflicts
        (recorded)  → pending, uncertain leader            uncertain.settle_uncertain
        pending     → cancelled          leader, operator  buffer.preempt
        pending     → queued             whoever sends it  outbox.mark_published
        pending     → queued             leader            outbox.mark_sent
        pending     → running            worker            statements.claim_run
        pending     → cancelled          operator          transitions.cancelled
        pending     → cancelled, missed  execution system  transitions.discarded
        pending     → failed             worker, send flow transitions.unrunnable
        pending     → missed             leader            late.settle_unsent
        pending     → uncertain          leader            uncertain.settle_uncertain
        buffered    → pending            worker, leader    buffer.release
        buffered    → missed, skipped    worker, leader    buffer.release
        buffered    → skipped            leader, operator  buffer.preempt
        buffered    → cancelled          operator          transitions.cancelled
        queued      → cancelled          leader, operator  buffer.preempt
        queued      → running            worker            statements.claim_run
        queued      → cancelled          operator          transitions.cancelled
        queued      → cancelled, missed  execution system  transitions.discarded
        queued      → failed             worker, send flow transitions.unrunnable
        queued      → uncertain          leader            uncertain.settle_uncertain
        running     → success            worker            transitions.succeeded
        running     → failed             worker            transitions.failed
        running     → retrying           worker            transitions.retrying
        running     → skipped            worker            transitions.skipped
        running     → missed             worker            transitions.missed
        running     → cancelled          worker            transitions.stopped
        running     → terminating        leader            transitions.terminating
        running     → success, failed, cancelled worker, leader    piece_runs.close_run
        running     → retrying, failed   leader            transitions.lost
        running     → cancelled          leader            transitions.lost
        running     → cancelled, missed  execution system  transitions.discarded
        running     → uncertain          leader            uncertain.settle_uncertain
        success     → running            operator          piece_moves.reopen_run
        success     → pending            operator          transitions.rerun
        failed      → running            operator          piece_moves.reopen_run
        failed      → pending            operator          transitions.retried
        retrying    → cancelled          leader, operator  buffer.preempt
        retrying    → running            worker            statements.claim_run
        retrying    → cancelled          operator          transitions.cancelled
        retrying    → cancelled, missed  execution system  transitions.discarded
        retrying    → failed             worker, send flow transitions.unrunnable
        retrying    → uncertain          leader            uncertain.settle_uncertain
        missed      → pending            operator          transitions.rerun
        skipped     → pending            operator          transitions.rerun
        cancelled   → pending            operator          transitions.rerun
        terminating → cancelled          worker            transitions.stopped
        terminating → cancelled          leader            transitions.lost
        terminating → cancelled, missed  execution system  transitions.discarded
        terminating → uncertain          leader            uncertain.settle_uncertain
        uncertain   → pending            operator          transitions.rerun

    ``success``, ``skipped``, ``missed``, ``cancelled`` and ``uncertain`` are final; ``failed``
    is final unless an operator retries it (a run split into pieces, ``failed`` or ``success``,
    goes back to ``running`` when an operator sends its failed pieces again). ``terminating``
    is a run whose cancel outlasted its grace, being stopped in its worker; ``buffered`` one
    held back by its job's overlap policy.
    """

    PENDING = "pending"
    # Recorded behind its job's runs (overlap buffer_all, cancel_other, terminate_other): held
    # back, then made pending and sent when they have ended, in slot order.
    BUFFERED = "buffered"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    RETRYING = "retrying"
    MISSED = "missed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    # An operator's cancel (or the job's overlap policy) outlasted its grace: the run is being
    # terminated in its worker; it ends cancelled.
    TERMINATING = "terminating"
    # Its fate was lost with the database's last writes (a failover to a server that had not
    # received them): it may have run. Recorded so by the job's ``on_uncertain = skip``.
    UNCERTAIN = "uncertain"


# A run waits for a worker (pending: recorded, not yet sent; queued: sent; retrying: its next
# attempt is due later). Only a waiting run can be claimed by a delivery, or cancelled.
WAITING_STATUSES = (RunStatus.PENDING, RunStatus.QUEUED, RunStatus.RETRYING)
# A run executing on a worker (a terminating one still holds its worker until it has stopped).
EXECUTING_STATUSES = (RunStatus.RUNNING, RunStatus.TERMINATING)
# A run still owes work: waiting, or executing on a worker (what the overlap policies count).
ACTIVE_STATUSES = (*WAITING_STATUSES, *EXECUTING_STATUSES)
# A run's fate is decided: nothing changes it any more (an operator may retry a failed one).
FINAL_STATUSES = (
    RunStatus.SUCCESS,
    RunStatus.FAILED,
    RunStatus.MISSED,
    RunStatus.SKIPPED,
    RunStatus.CANCELLED,
    RunStatus.UNCERTAIN,
)


class RunTrigger(models.TextChoices):
    SCHEDULE = "schedule"
    CATCHUP = "catchup"
    MANUAL = "manual"
    BACKFILL = "backfill"
    # A slot whose fate was lost with the database's last writes, run by ``on_uncertain = run``.
    UNCERTAIN = "uncertain"


# The runs a job's schedule makes (what ``max_runs`` counts), as opposed to an operator's.
SCHEDULED_TRIGGERS = (RunTrigger.SCHEDULE, RunTrigger.CATCHUP)


class JobRunManager(models.Manager["JobRun"]):
    def scheduled_count(self, job_id: int) -> int:
        """What a job's ``max_runs`` counts, from the ledger: runs its schedule dispatched."""
        runs = self.filter(job_id=job_id, trigger__in=SCHEDULED_TRIGGERS)
        return int(runs.exclude(status__in=(RunStatus.MISSED, RunStatus.SKIPPED)).count())

    def withdraw_recorded_ahead(
        self, job_id: int, *, after: datetime, using: str | None = None
    ) -> int:
        """Delete ``job_id``'s runs recorded ahead and due after ``after``, never published;
        return how many.

        The job was paused, deleted, re-timed or re-routed before their time: they were never
        due under its new definition. The leader checks that a run it recorded ahead is still
        there right before it publishes it, so a withdrawn run is never sent.
        """
        runs = self.db_manager(using) if using else self
        deleted, _ = runs.filter(
            job_id=job_id, status=RunStatus.PENDING, publish_count=0, due_at__gt=after
        ).delete()
        if deleted:
            logger.info(
                "runs.withdrawn job=%s count=%s after=%s", job_id, deleted, after.isoformat()
            )
        return int(deleted)


@dataclass(frozen=True)
class PieceInfo:
    """The piece a body executes: its index (from 0), its planner's key (None for a fixed
    count), how many pieces its run has, and the piece's attempt (a retried piece: 2 and up)."""

    index: int
    key: Any
    count: int
    attempt: int = 1


class RunCancelled(Exception):
    """Raised in a run's body to stop it because its cancel was asked for: by
    :meth:`JobRun.raise_if_cancelled`, or at the heartbeat that brings the cancel when the job
    says so (``cancel_interrupts``). The run is recorded ``cancelled``. A body that catches
    ``Exception`` broadly swallows it; its run still ends ``cancelled``."""

    def __str__(self) -> str:
        # Raised by the heartbeat, it has no message of its own.
        return super().__str__() or "its run was asked to stop"


class JobRun(models.Model):
    """One slot of one job: the outbox row the leader publishes and the ledger of its fate."""

    job = models.ForeignKey("JobDefinition", on_delete=models.CASCADE, related_name="runs")
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
        default=0,
        help_text="How many times its message was sent (to Celery's broker, or to the task's "
        "django.tasks backend).",
    )
    republish_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="If no worker has started it by then, its message is sent again (the broker "
        "or the task backend may have lost it); the wait doubles with every copy.",
    )
    worker = models.CharField(max_length=255, blank=True, help_text="Worker hostname and pid.")
    worker_pool = models.CharField(
        max_length=32,
        blank=True,
        default="",
        db_default="",  # rows an earlier release's node inserts during a rolling upgrade
        help_text="How its worker runs tasks: a Celery pool (prefork, threads, solo, eventlet, "
        "gevent) or django.tasks. Only prefork, eventlet and gevent can terminate a run.",
    )
    backend_result_id = models.CharField(
        max_length=64,
        blank=True,
        default="",
        # In the schema too: a node of an earlier release, during a rolling upgrade, inserts
        # runs without this column.
        db_default="",
        help_text="The id its execution backend gave the attempt's result, where that is not the "
        "task id: a django.tasks backend's TaskResult id (for get_result, or its admin).",
    )
    claim_token = models.CharField(
        max_length=32,
        blank=True,
        default="",
        db_default="",  # rows an earlier release's node inserts during a rolling upgrade
        editable=False,
        help_text="The delivery that claimed the attempt: a worker that retries its claim or "
        "its record after a lost answer (a database switchover) knows its own.",
    )
    reason = models.CharField(
        max_length=255, blank=True, help_text="Why the run was missed, skipped or cancelled."
    )
    cancel_requested_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a cancel of the running run was asked for (database time); the body "
        "sees it at its next heartbeat.",
    )
    cancel_requested_by = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",  # rows an earlier release's node inserts during a rolling upgrade
        help_text="Who asked for the cancel: a user, or the job's overlap policy.",
    )
    piece_count = models.PositiveIntegerField(
        default=0,
        db_default=0,  # rows an earlier release's node inserts during a rolling upgrade
        help_text="How many pieces the run was split into (0: none); its status follows theirs.",
    )
    kwargs_override = models.JSONField(
        null=True,
        blank=True,
        help_text="Keyword arguments given for this run alone (an operator's run now), over the "
        "job's own.",
    )
    result = models.TextField(blank=True, help_text="Short repr of the task's return value.")
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobRunManager()

    # Inside a piece's body (``current_run()``): which piece of the run it is (else None).
    piece: PieceInfo | None = None

    class Meta:
        verbose_name = "run"
        ordering: ClassVar = ["-scheduled_for"]
        permissions: ClassVar = [
            ("retry_jobrun", "Can retry failed runs"),
            ("cancel_jobrun", "Can cancel runs"),
        ]
        get_latest_by = "scheduled_for"
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["job", "scheduled_for"], name=ONE_PER_SLOT),
        ]
        indexes: ClassVar = [
            models.Index(fields=["status", "scheduled_for"], name="cluster_cron_run_status"),
            # Read backwards for the newest first; ascending, so that on MySQL/MariaDB the id
            # InnoDB appends to it runs the same way as the slot and serves the lists' tie-break
            # (ORDER BY slot DESC, id DESC) too: a descending one made them sort every row.
            models.Index(fields=["scheduled_for"], name="cluster_cron_run_slot"),
            models.Index(fields=["trigger", "scheduled_for"], name="cluster_cron_run_trigger"),
            # What workers took lately, per queue: the outbox's sign of a moving backlog.
            models.Index(fields=["started_at"], name="cluster_cron_run_started"),
            # A job's runs of one status, newest first: the pruning's keep_last, a job's page
            # filtered by status.
            models.Index(
                fields=["job", "status", "-scheduled_for"], name="cluster_cron_run_job_status"
            ),
        ]

    def __str__(self) -> str:
        """``Run 8 of nightly-report, slot 2026-11-23 12:25:17 UTC (queued)``: the run's own id
        first (the job's name when it is loaded, else its id)."""
        job = self.job.name if JobRun.job.is_cached(self) else f"job {self.job_id}"
        return (
            f"Run {self.pk} of {job}, slot {self.scheduled_for:%Y-%m-%d %H:%M:%S} UTC "
            f"({self.status})"
        )

    def task_kwargs(self) -> dict[str, Any]:
        """The keyword arguments this run's task is called with: the job's, with the run's own
        (``kwargs_override``) over them."""
        return {**(self.job.kwargs or {}), **(self.kwargs_override or {})}

    @property
    def cancel_requested(self) -> bool:
        """Whether a cancel of this run was asked for: inside a running body (``current_run()``),
        what the heartbeat last brought, at most one heartbeat interval behind the request."""
        return self.cancel_requested_at is not None

    def raise_if_cancelled(self) -> None:
        """Raise :class:`RunCancelled` if a cancel of this run was asked for: call it between
        steps of a long body to stop at a point of its own choosing."""
        if self.cancel_requested_at is not None:
            by = f" by {self.cancel_requested_by}" if self.cancel_requested_by else ""
            raise RunCancelled(f"run {self.pk}: cancel requested{by}")


def not_ahead(runs: Any, now: datetime) -> Any:
    """``runs`` without those recorded ahead of their time (they have not happened yet)."""
    return runs.exclude(status=RunStatus.PENDING, due_at__gt=now)
