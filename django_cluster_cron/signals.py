"""Django signals for the run lifecycle, so projects can hook alerts, metrics or audit trails.

Every signal is sent with ``sender=JobRun`` and ``run=<the JobRun>`` (as it was just saved).
Receivers run in the worker (or, for ``run_lost``, in the scheduler) after the state change is
committed; a receiver that raises is logged and does not affect the run.

* ``run_started`` — a worker claimed the run and is about to call the job's task.
* ``run_succeeded`` — the task returned; ``result`` is its return value.
* ``run_failed`` — the last attempt failed (or the run was lost with no retries left);
  ``error`` is the exception (``None`` for a lost worker).
* ``run_retrying`` — an attempt failed and the next is scheduled; ``error``, ``delay`` (seconds).
* ``run_skipped`` — the overlap policy skipped the run at execution time.
* ``run_lost`` — its worker stopped heartbeating; ``retried`` says whether it goes again.
* ``run_cancelled`` — it ended after its cancel was asked for (it is never retried); ``by``
  says who asked (empty if the task raised ``RunCancelled`` itself), ``outcome`` what its body
  had done.

Two signals are about a job (``sender=JobDefinition``, ``job=<the job>``): ``job_auto_paused``
(``failures``, ``run_ids``) — its ``pause_after_failures`` policy paused it; ``job_resumed``
(``slots_not_run``) — it was resumed, and that many of its slots fell while it was paused (they
are not caught up).
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("django_cluster_cron.worker")

run_started = Signal()
run_succeeded = Signal()
run_failed = Signal()
run_retrying = Signal()
run_skipped = Signal()
run_lost = Signal()
run_cancelled = Signal()
job_auto_paused = Signal()
job_resumed = Signal()


def send(signal: Signal, run: Any, **extra: Any) -> None:
    for receiver, response in signal.send_robust(sender=type(run), run=run, **extra):
        if isinstance(response, Exception):
            logger.error(
                "signal.receiver_failed receiver=%r run=%s error=%s", receiver, run.pk, response
            )


def send_job(signal: Signal, job: Any, **extra: Any) -> None:
    for receiver, response in signal.send_robust(sender=type(job), job=job, **extra):
        if isinstance(response, Exception):
            logger.error(
                "signal.receiver_failed receiver=%r job=%s error=%s", receiver, job.pk, response
            )
