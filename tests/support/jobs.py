"""Jobs and runs made directly, without a scheduler, for the worker side's tests.

``make_job`` and ``make_run`` write the rows; ``apply`` runs the real task in this process, as a
worker would for one delivered message; ``publish`` sends a run's message to the suite's broker
for real Celery workers (tests/cluster). ``job_owing_one_slot`` is a job whose next slot is
already due, for a scheduler to record at once.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.db.models import F, Min
from django.utils import timezone

from django_cluster_cron.dispatch.celery import CeleryDispatcher
from django_cluster_cron.ledger.outbox import OutboxMessage
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from django_cluster_cron.tasks import execute_run


def make_job(task="tests.record", args=None, kwargs=None, **fields):
    job = JobDefinition(
        name=f"job-{uuid.uuid4().hex[:8]}",
        cron="0 0 1 1 *",
        timezone="UTC",
        task=task,
        args=args or [],
        kwargs=kwargs or {},
        enabled=False,
        **fields,
    )
    job.full_clean()
    job.save()
    return job


def make_run(job, status=RunStatus.QUEUED):
    # One second before the job's earliest run: unique per job whatever the clock does between
    # two calls (now-minus-count collided when a second boundary fell between them).
    earliest = JobRun.objects.filter(job=job).aggregate(first=Min("scheduled_for"))["first"]
    slot = (earliest or timezone.now().replace(microsecond=0)) - timedelta(seconds=1)
    return JobRun.objects.create(
        job=job,
        scheduled_for=slot,
        task_id=job.task_id_for(slot),
        trigger=RunTrigger.MANUAL,
        status=status,
    )


def apply(run, attempt=1, task_id=None):
    """Run the real task in this process, as a worker would for one delivered message."""
    execute_run.apply(args=(run.pk, attempt), task_id=task_id or run.task_id)
    run.refresh_from_db()
    return run


def publish(run, copies=1):
    run = JobRun.objects.select_related("job").get(pk=run.pk)
    message = OutboxMessage.for_run(run)
    CeleryDispatcher().publish([message] * copies)


def job_owing_one_slot(name, **fields):
    job = JobDefinition(
        name=name, cron="* * * * *", timezone="UTC", task="tests.add", args=[1, 2], **fields
    )
    job.full_clean()
    job.save()
    # Owed one slot: the schedule as if it had started a minute earlier.
    JobDefinition.objects.filter(pk=job.pk).update(
        last_scheduled_at=F("last_scheduled_at") - timedelta(minutes=1),
        next_run_at=F("next_run_at") - timedelta(minutes=1),
    )
    return job
