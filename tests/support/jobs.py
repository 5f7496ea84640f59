"""Jobs and runs made directly, without a scheduler, for the worker side's tests.

``make_job`` and ``make_run`` write the rows; ``apply`` runs the real task in this process, as a
worker would for one delivered message; ``publish`` sends a run's message to the suite's broker
for real Celery workers (tests/cluster). ``job_owing_one_slot`` is a job whose next slot is
already due, for a scheduler to record at once.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.db.models import F, Min
from django.utils import timezone

from django_cluster_cron.dispatch.celery import CeleryDispatcher
from django_cluster_cron.ledger.outbox import OutboxMessage
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from django_cluster_cron.tasks import execute_run


def make_job(task="tests.record", args=None, kwargs=None, **fields):
    """A job of ``task``, paused unless ``enabled=True``; ``args`` left out: a label for the
    default task (it takes one), none for another."""
    if args is None:
        args = ["made"] if task == "tests.record" else []
    fields.setdefault("enabled", False)
    job = JobDefinition(
        name=f"job-{uuid.uuid4().hex[:8]}",
        cron="0 0 1 1 *",
        timezone="UTC",
        task=task,
        args=args,
        kwargs=kwargs or {},
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
    if slot.second == 0:
        # Never a whole minute: a test's backfill of a minutely job makes those, and a run already
        # on one of its slots would leave the backfill a run short (at hh:mm:01 it did).
        slot -= timedelta(seconds=1)
    return JobRun.objects.create(
        job=job,
        scheduled_for=slot,
        task_id=job.task_id_for(slot),
        trigger=RunTrigger.MANUAL,
        status=status,
    )


# The message form ``apply`` delivers: "task" (the job's own task, with the run's headers, as the
# leader sends it) or "execute_run" (the form of workers before 0.2). Tests of the worker side
# run in both (the ``message_form`` fixture of tests/database/conftest.py sets it).
FORM: dict[str, Any] = {"current": "task"}


def apply(run, attempt=1, task_id=None, form=None):
    """Run the real task in this process, as a worker would for one delivered message; return
    the run as the ledger then holds it. ``last_result`` holds Celery's view (an EagerResult)."""
    form = form or FORM["current"]
    task_id = task_id or run.task_id
    if form == "execute_run":
        FORM["last_result"] = execute_run.apply(args=(run.pk, attempt), task_id=task_id)
    else:
        FORM["last_result"] = apply_own_task(run, attempt=attempt, task_id=task_id)
    run.refresh_from_db()
    return run


def apply_own_task(run, attempt=1, task_id=None, **options):
    """Deliver the run's message in the job's-own-task form in this process (Celery's apply, with
    the wrapper every worker installs); Celery's EagerResult."""
    from django_cluster_cron.celery_app import get_celery_app
    from django_cluster_cron.worker.celery import deliver_here

    run = JobRun.objects.select_related("job").get(pk=run.pk)
    message = dataclasses.replace(
        OutboxMessage.for_run(run), attempt=attempt, task_id=task_id or run.task_id
    )
    return deliver_here(get_celery_app(), message, **options)


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


def outbox_message(n: int = 1, **fields: Any) -> OutboxMessage:
    """A run's message as the outbox hands it to the dispatcher, for a run that need not exist."""
    base = OutboxMessage(
        run_id=1000 + n,
        task_id=f"cron-{n}-{uuid.uuid4().hex}",
        job_id=7,
        scheduled_for=datetime(2030, 1, 1, 12, tzinfo=dt_timezone.utc),
        attempt=1,
        epoch=3,
        trigger="schedule",
        queue=None,
        priority=None,
        expires=None,
    )
    return dataclasses.replace(base, **fields)
