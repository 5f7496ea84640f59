"""The Celery task every scheduled run is sent as.

One generic task (``django_cluster_cron.execute_run``) rather than the user's task itself: the
claim that makes a duplicate delivery harmless has to happen *before* the job's code runs, in one
place, for every registered task without changing it. The job's own task is then called in-process
with the job's arguments.

This is the first cut of the worker side: claim, run, record. Retries with backoff, time limits,
lost-worker detection and the execution-side overlap lock build on it.
"""

from __future__ import annotations

import logging
import os
import socket
import traceback
from typing import Any

from celery import shared_task
from django.utils import timezone

from .models import JobRun, RunStatus

logger = logging.getLogger("django_cluster_cron.worker")

RESULT_LIMIT = 1000
CLAIMABLE = (RunStatus.PENDING, RunStatus.QUEUED)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@shared_task(name="django_cluster_cron.execute_run", bind=True, ignore_result=True)
def execute_run(self: Any, run_id: int) -> None:
    started = timezone.now()
    claimed = JobRun.objects.filter(
        pk=run_id, task_id=self.request.id, status__in=CLAIMABLE
    ).update(status=RunStatus.RUNNING, started_at=started, worker=worker_name())
    if not claimed:
        # A second copy of the message (outbox re-publish, broker redelivery), a run cancelled
        # meanwhile, or a message that names no run of ours: acknowledge and do nothing.
        logger.info("run.duplicate_delivery run=%s task_id=%s", run_id, self.request.id)
        return
    run = JobRun.objects.select_related("job").get(pk=run_id)
    job = run.job
    try:
        task = self.app.tasks[job.task]
        result = task(*job.args, **job.kwargs)
    except Exception as exc:
        _finish(
            run,
            started,
            RunStatus.FAILED,
            error=f"{type(exc).__name__}: {exc}",
            trace=traceback.format_exc(),
        )
        logger.warning("run.failed run=%s job=%s error=%s", run.pk, job.pk, exc)
        return
    _finish(run, started, RunStatus.SUCCESS, result=repr(result)[:RESULT_LIMIT])
    logger.info("run.succeeded run=%s job=%s", run.pk, job.pk)


def _finish(
    run: JobRun,
    started: Any,
    status: str,
    *,
    result: str = "",
    error: str = "",
    trace: str = "",
) -> None:
    finished = timezone.now()
    JobRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
        status=status,
        finished_at=finished,
        duration=finished - started,
        result=result,
        error=error[:10_000],
        traceback=trace[:50_000],
    )
