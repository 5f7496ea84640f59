"""How long a job's runs stay in the ledger (:class:`JobRetention`, a base of ``JobDefinition``)
and what is left of them once they are gone: one :class:`RunSummary` per job and day.

The periods and counts themselves are :mod:`django_cluster_cron.core.retention`; pruning and
summing up are :mod:`django_cluster_cron.ledger.retention`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models

from ..conf import app_settings
from ..core.retention import Retention, resolve

__all__ = ["JobRetention", "RunSummary", "retention_policy"]


class JobRetention(models.Model):
    """A job's own retention, over the project's (``RUN_RETENTION_DAYS``, ``RUN_RETENTION``,
    ``RUN_KEEP_LAST``)."""

    retention = models.JSONField(
        null=True,
        blank=True,
        verbose_name="retention (days)",
        help_text="Days its finished runs are kept, per final status, over the project's: "
        'e.g. {"success": 7, "failed": 365}; null keeps a status for ever. Empty: the '
        "project's periods.",
    )
    keep_last = models.JSONField(
        null=True,
        blank=True,
        help_text="The newest runs of each final status kept however old (a monthly job keeps "
        'its history): a number for every status, or e.g. {"failed": 20}. Empty: the '
        "project's RUN_KEEP_LAST.",
    )

    class Meta:
        abstract = True

    def retention_policy(self) -> Retention:
        """The project's retention with this job's overrides over it."""
        return retention_policy(self.retention, self.keep_last)


def retention_policy(job_days: Any = None, job_keep_last: Any = None) -> Retention:
    """The project's retention (``RUN_RETENTION_DAYS``, ``RUN_RETENTION``, ``RUN_KEEP_LAST``)
    with a job's own ``retention`` and ``keep_last`` over it (None: the project's alone)."""
    return resolve(
        default_days=app_settings.RUN_RETENTION_DAYS,
        by_status=app_settings.RUN_RETENTION,
        keep_last=app_settings.RUN_KEEP_LAST,
        job_days=job_days,
        job_keep_last=job_keep_last,
    )


class RunSummary(models.Model):
    """One job's runs of one day (their slots' UTC date), summed up before the first of them is
    pruned: what the job's trend and history read once the runs are gone."""

    job = models.ForeignKey(
        "JobDefinition",
        on_delete=models.CASCADE,
        related_name="summaries",
        db_index=False,  # the one-a-day constraint leads with it
    )
    day = models.DateField(help_text="The UTC date of the slots summed up.")
    success = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    missed = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    uncertain = models.PositiveIntegerField(default=0)
    unfinished = models.PositiveIntegerField(
        default=0, help_text="Runs still waiting or running when the day was summed up."
    )
    retries = models.PositiveIntegerField(default=0, help_text="Attempts beyond each run's first.")
    duration_p50 = models.FloatField(null=True, blank=True, help_text="Seconds.")
    duration_p95 = models.FloatField(null=True, blank=True, help_text="Seconds.")
    lateness_p95 = models.FloatField(
        null=True,
        blank=True,
        help_text="Seconds from when a run was due to when a worker started it (95th percentile).",
    )
    summed_at = models.DateTimeField(help_text="When the runs were summed up (database time).")

    class Meta:
        verbose_name = "daily summary"
        verbose_name_plural = "daily summaries"
        ordering: ClassVar = ["-day"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["job", "day"], name="cluster_cron_summary_one_a_day"),
        ]
        indexes: ClassVar = [models.Index(fields=["day"], name="cluster_cron_summary_day")]

    def __str__(self) -> str:
        return f"Runs of job {self.job_id} on {self.day:%Y-%m-%d}"

    @property
    def runs(self) -> int:
        return (
            self.success
            + self.failed
            + self.skipped
            + self.missed
            + self.cancelled
            + self.uncertain
            + self.unfinished
        )
