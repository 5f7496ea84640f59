"""What changed jobs: the audit trail (one ``JobChange`` per change) and the record of the last
sync of the jobs declared in code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from django.conf import settings
from django.db import models

from .. import audit
from ..dbtime import DbNow
from .fields import AUDITED_FIELDS


class JobChange(models.Model):
    """One change to a job: who made it, through what, which fields from what to what, and why.

    Written by :func:`record_save` for every save of a job (the admin form and
    actions, the API, code sync, imports, your own code) and for the changes the cluster makes
    itself (a pause after repeated failures). The job's History page and the API read it.
    """

    job = models.ForeignKey("JobDefinition", on_delete=models.CASCADE, related_name="changes")
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


def stored_snapshot(job: models.Model) -> dict[str, Any] | None:
    """The job's audited fields as the database holds them now (None if it has no row)."""
    row = type(job)._base_manager.filter(pk=job.pk).values(*AUDITED_FIELDS).first()
    return None if row is None else audit.snapshot(row, AUDITED_FIELDS)


def record_save(job: models.Model, before: Mapping[str, Any] | None) -> JobChange | None:
    """Record a save of ``job`` (called by ``JobDefinition.save`` inside its transaction)."""
    after = audit.snapshot({field: getattr(job, field) for field in AUDITED_FIELDS}, AUDITED_FIELDS)
    changes = audit.diff(before or {}, after) if before is not None else after
    if before is not None and not changes:
        return None
    return record_change(job, audit.action_of(before, after), changes)


def record_change(
    job: models.Model,
    action: str,
    changes: Mapping[str, list[Any]] | Mapping[str, Any] | None = None,
    *,
    note: str = "",
    actor: audit.Actor | None = None,
) -> JobChange:
    """Write one entry of ``job``'s trail, at the database's time, by ``actor`` (else whoever
    the current :func:`django_cluster_cron.audit.acting` context names)."""
    who = actor or audit.current()
    entry = JobChange(
        job_id=job.pk,
        actor=who.name,
        user_id=who.user_id,
        via=who.via,
        action=action,
        changes=dict(changes or {}),
        note="; ".join(part for part in (note, who.note) if part),
    )
    entry.at = DbNow()  # resolved by the INSERT
    entry.save(force_insert=True)
    return entry
