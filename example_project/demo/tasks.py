"""Example tasks for demo jobs. Each has an explicit name: a JobDefinition refers to it by name."""

import logging
import os
import time
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from celery import shared_task

logger = logging.getLogger(__name__)


@shared_task(name="demo.echo")
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Log the arguments and return them: the smallest way to see a job run."""
    logger.info("demo.echo args=%r kwargs=%r", args, kwargs)
    return {"args": list(args), "kwargs": kwargs}


@shared_task(name="demo.sleep")
def sleep(seconds: float = 1.0) -> float:
    """Take a while, to show runs that overlap and how long they last."""
    seconds = float(seconds)
    logger.info("demo.sleep start seconds=%s", seconds)
    time.sleep(seconds)
    logger.info("demo.sleep done seconds=%s", seconds)
    return seconds


# Where demo.http_get may go: the demo's own ping view on this host. Whoever may add a job
# chooses the URL, so a task that fetches any URL would fetch cloud metadata or scan the
# internal network for them.
PING_HOSTS = {"127.0.0.1", "localhost"}
PING_PATH = "/demo/ping/"


@shared_task(name="demo.http_get")
def http_get(url: str) -> dict[str, Any]:
    """GET the demo's own `/demo/ping/` on this host; an HTTP error fails the run."""
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or parts.hostname not in PING_HOSTS:
        raise ValueError(
            f"demo.http_get: only the demo's own {PING_PATH} on this host "
            f"(http://127.0.0.1:<port>{PING_PATH}), got {url!r}"
        )
    if parts.path != PING_PATH or parts.query or parts.username:
        raise ValueError(f"demo.http_get: only the path {PING_PATH}, got {url!r}")
    with urllib.request.urlopen(url, timeout=5) as response:
        body = response.read()
        status = response.status
    logger.info("demo.http_get url=%s status=%s bytes=%s", url, status, len(body))
    return {"status": status, "bytes": len(body)}


@shared_task(name="demo.always_fails")
def always_fails() -> None:
    """Fail every time, to show failed runs, error messages and retries in the admin."""
    raise RuntimeError("demo.always_fails failed on purpose")


@shared_task(name="demo.witness")
def witness(seconds: float = 0.0) -> int:
    """Record this execution (job, slot, attempt, pid, start/end) in demo.Execution.

    The chaos suite checks the guarantees against this table, not against the run ledger.
    """
    from django.utils import timezone

    from django_cluster_cron.worker import current_run

    from .models import Execution

    run = current_run()
    if run is None:
        raise RuntimeError("demo.witness records scheduled runs; it was called outside one")
    # A piece of the run is told apart by its own task id (``<run's>.<index>``) and attempt.
    piece = run.piece
    execution = Execution._default_manager.create(
        job_name=run.job.name,
        job_id=run.job_id,
        slot=run.scheduled_for,
        attempt=run.attempt if piece is None else piece.attempt,
        task_id=run.task_id if piece is None else f"{run.task_id}.{piece.index}",
        pid=os.getpid(),
        started_at=timezone.now(),
    )
    # Works for ``seconds`` in short steps, and stops early once the run is asked to stop (an
    # operator's cancel, or a newer slot of a cancel_other job).
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline and not run.cancel_requested:
        time.sleep(min(0.05, max(deadline - time.monotonic(), 0.0)))
    Execution._default_manager.filter(pk=execution.pk).update(finished_at=timezone.now())
    return int(execution.pk)


@shared_task(name="demo.completed")
def completed(summary: dict[str, Any]) -> str:
    """A run with pieces ended: record its completion message in demo.Execution, as the
    witness records a body (``task_id`` ``<run's>.done``), for the chaos suite to count."""
    from django.utils import timezone

    from django_cluster_cron.worker import current_run

    from .models import Execution

    run = current_run()
    if run is None or run.piece is None:
        raise RuntimeError("demo.completed is a run's completion task")
    now = timezone.now()
    Execution._default_manager.create(
        job_name=run.job.name,
        job_id=run.job_id,
        slot=run.scheduled_for,
        attempt=run.piece.attempt,
        task_id=f"{run.task_id}.done",
        pid=os.getpid(),
        started_at=now,
        finished_at=now,
    )
    logger.info(
        "demo.completed run=%s status=%s counts=%s", run.pk, summary["status"], summary["counts"]
    )
    return str(summary["status"])
