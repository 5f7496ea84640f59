"""Pause a job after N failed runs in a row (its ``pause_after_failures``).

A run counts once it has failed for good (its retries exhausted, or lost with none left); a
success resets the count, and so does resuming the job. Only jobs with the policy pay for it: the
others never touch the counter. Counting and pausing are conditional UPDATEs on the job's row, so
two workers failing at once count twice and pause once.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import F

from .. import audit, signals
from ..dbtime import database_now
from ..models import JobDefinition, JobRun, RunStatus
from ..models.changes import record_change

logger = logging.getLogger("django_cluster_cron.worker")

POLICY_ACTOR = audit.Actor(name="policy: pause after failures", via="policy")


def note_success(job: JobDefinition) -> None:
    if job.pause_after_failures:
        JobDefinition.all_objects.filter(pk=job.pk, consecutive_failures__gt=0).update(
            consecutive_failures=0
        )


def note_failure(job: JobDefinition) -> bool:
    """Count a failed run of ``job``; pause it if that makes ``pause_after_failures``. True if
    this call paused it."""
    limit = job.pause_after_failures
    if not limit:
        return False
    rows = JobDefinition.all_objects.filter(pk=job.pk)
    with transaction.atomic():
        rows.update(consecutive_failures=F("consecutive_failures") + 1)
        failures = rows.values_list("consecutive_failures", flat=True).first() or 0
        if failures < limit:
            return False
        failed = list(
            JobRun.objects.filter(job_id=job.pk, status=RunStatus.FAILED)
            .order_by("-finished_at", "-pk")
            .values_list("pk", flat=True)[:limit]
        )
        ids = ", ".join(str(pk) for pk in reversed(failed))
        note = f"paused after {failures} failed runs in a row (runs {ids})"
        paused = rows.filter(enabled=True).update(
            enabled=False, pause_note=note[:255], next_run_at=None
        )
        if not paused:
            return False
        # Its runs recorded ahead of their time go with the pause, as with an operator's.
        JobRun.objects.withdraw_recorded_ahead(job.pk, after=database_now())
        record_change(
            job,
            "paused",
            {"enabled": [True, False], "pause_note": [job.pause_note, note[:255]]},
            note=note,
            actor=POLICY_ACTOR,
        )
    job.enabled, job.pause_note = False, note[:255]
    logger.warning("job.auto_paused job=%s failures=%s runs=%s", job.pk, failures, ids)
    signals.send_job(signals.job_auto_paused, job, failures=failures, run_ids=failed)
    return True
