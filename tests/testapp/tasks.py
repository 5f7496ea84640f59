"""Tasks the suite schedules. Explicit names: jobs refer to them by name."""

from __future__ import annotations

import time
from typing import Any

from celery import shared_task


@shared_task(name="tests.add")
def add(x: int, y: int) -> int:
    return x + y


@shared_task(name="tests.echo")
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@shared_task(name="tests.fail")
def fail() -> None:
    raise RuntimeError("tests.fail always raises")


@shared_task(name="tests.sleep")
def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


_stamps: list[Any] = []


@shared_task(name="tests.stamp", bind=True)
def stamp(self: Any, write: bool = False) -> None:
    """The end-to-end benchmark's job (bench/end_to_end.py): note when its body started and
    ended, as ``<task id> <start> <end>`` (wall clock) in a file of this process under
    ``$BENCH_STAMPS``; with ``write``, one database write first (a row in the witness table)."""
    import os

    started = time.time()
    if write:
        from django.utils import timezone

        from tests.testapp.models import Execution

        Execution.objects.create(label="stamp", pid=os.getpid(), started_at=timezone.now())
    directory = os.environ.get("BENCH_STAMPS")
    if not directory:
        return
    if not _stamps:
        _stamps.append(open(f"{directory}/{os.getpid()}.log", "a", buffering=1))  # noqa: SIM115
    _stamps[0].write(f"{self.request.id} {started:.6f} {time.time():.6f}\n")


def _witness(label: str, seconds: float) -> int:
    """Record one execution of a body (start, sleep, end) in the witness table; return its id."""
    import os

    from django.utils import timezone

    from tests.testapp.models import Execution

    execution = Execution.objects.create(label=label, pid=os.getpid(), started_at=timezone.now())
    if seconds:
        time.sleep(seconds)
    Execution.objects.filter(pk=execution.pk).update(finished_at=timezone.now())
    return int(execution.pk)


@shared_task(name="tests.record")
def record(label: str, seconds: float = 0.0) -> int:
    return _witness(label, seconds)


@shared_task(name="tests.flaky")
def flaky(label: str, failures: int) -> int:
    """Fail the first ``failures`` executions for ``label``, then succeed."""
    from tests.testapp.models import Execution

    _witness(label, 0)
    if Execution.objects.filter(label=label).count() <= failures:
        raise RuntimeError(f"{label}: failing on purpose")
    return failures


@shared_task(name="tests.slow_first")
def slow_first(label: str, seconds: float) -> int:
    """Sleep ``seconds`` on the first execution for ``label`` only (to be killed mid-run)."""
    from tests.testapp.models import Execution

    first = not Execution.objects.filter(label=label).exists()
    return _witness(label, seconds if first else 0)


@shared_task(name="tests.whoami")
def whoami() -> list[Any]:
    """The run this body executes for, as seen through current_run()."""
    from django_cluster_cron.worker import current_run

    run = current_run()
    assert run is not None
    return [run.pk, run.attempt, run.task_id]


@shared_task(name="tests.cut_own_connection")
def cut_own_connection() -> None:
    """Have the server terminate this process's own connection (the body fails with it)."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute("KILL CONNECTION CONNECTION_ID()")
        else:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


@shared_task(name="tests.ignore")
def ignore() -> None:
    from celery.exceptions import Ignore

    raise Ignore("nothing to do this time")


@shared_task(name="tests.reject")
def reject(requeue: bool = False) -> None:
    from celery.exceptions import Reject

    raise Reject("refusing this input", requeue=requeue)


@shared_task(name="tests.retry_self", bind=True)
def retry_self(self: Any) -> None:
    """Ask Celery for a retry from inside the body (called in-process: Celery raises)."""
    raise self.retry(exc=RuntimeError("try again later"), countdown=1)


@shared_task(name="tests.soft_limited")
def soft_limited(label: str, seconds: float, catch: bool = False) -> str:
    """Sleep past the job's soft time limit; with ``catch``, clean up and return normally."""
    from celery.exceptions import SoftTimeLimitExceeded

    try:
        _witness(label, seconds)
    except SoftTimeLimitExceeded:
        if not catch:
            raise
        return "cleaned up after the soft time limit"
    return "finished in time"


@shared_task(name="tests.witness_slot")
def witness_slot(seconds: float = 0.0) -> int:
    """Record one execution labelled with the slot it ran for (``<job>@<slot>``)."""
    from django_cluster_cron.worker import current_run

    run = current_run()
    assert run is not None
    return _witness(f"{run.job_id}@{run.scheduled_for.isoformat()}", seconds)


@shared_task(name="tests.exit")
def exit_(code: int = 3) -> None:
    """The body ends its own process's work with sys.exit (a job's bug, not a signal)."""
    import sys

    sys.exit(code)


@shared_task(name="tests.signal_self")
def signal_self() -> None:
    """Send this process SIGTERM and wait for its handler (a pool process being terminated)."""
    import os
    import signal
    import time

    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(100):  # the handler runs between two bytecodes of this thread
        time.sleep(0.01)


@shared_task(name="tests.recurse", bind=True)
def recurse(self: Any, depth: int) -> int:
    """Calls itself as a function ``depth`` times: one run, one claim."""
    return depth if depth == 0 else 1 + self(depth - 1)


@shared_task(name="tests.limited", time_limit=30, soft_time_limit=20)
def limited(x: int = 0) -> int:
    """A task with Celery options of its own (time limits)."""
    return x


def _until_cancelled(
    label: str,
    seconds: float,
    *,
    check: bool,
    let_go: bool = False,
    ends: str = "worked to the end",
) -> str:
    """Witness a body that works in short steps for up to ``seconds`` (then says ``ends``);
    with ``check``, it looks at ``current_run().cancel_requested`` between steps and stops when
    it is set; with ``let_go``, it stops when the test writes a witness row ``go:<label>``."""
    import os

    from django.utils import timezone

    from django_cluster_cron.worker import current_run
    from tests.testapp.models import Execution

    run = current_run()
    execution = Execution.objects.create(label=label, pid=os.getpid(), started_at=timezone.now())
    deadline = time.monotonic() + seconds
    outcome = ends
    while time.monotonic() < deadline:
        if let_go and Execution.objects.filter(label=f"go:{label}").exists():
            outcome = "let go"
            break
        if check and run is not None and run.cancel_requested:
            outcome = "stopped at the cancel"
            break
        time.sleep(0.02)  # one step of the body's work
    Execution.objects.filter(pk=execution.pk).update(finished_at=timezone.now())
    return outcome


@shared_task(name="tests.until_cancelled")
def until_cancelled(label: str, seconds: float = 60.0) -> str:
    """Work until the run's cancel is seen (checked between steps), or ``seconds``."""
    return _until_cancelled(label, seconds, check=True)


@shared_task(name="tests.busy")
def busy(label: str, seconds: float = 60.0) -> str:
    """Work in short steps for ``seconds`` without looking at any cancel."""
    return _until_cancelled(label, seconds, check=False)


@shared_task(name="tests.hold")
def hold(label: str, obey_cancel: bool = True, seconds: float = 120.0) -> str:
    """Witness a body (labelled ``<label>:<run id>``) that runs until the test lets it end (a
    witness row labelled ``go:<label>:<run id>``), or, with ``obey_cancel``, until its run's
    cancel is seen; at most ``seconds``."""
    from django_cluster_cron.worker import current_run

    run = current_run()
    label = f"{label}:{run.pk}" if run is not None else label
    return _until_cancelled(label, seconds, check=obey_cancel, let_go=True, ends="timed out")


@shared_task(name="tests.piece")
def piece(
    label: str,
    seconds: float = 0.0,
    fail: list[int] | None = None,
    slow: int | None = None,
    slow_seconds: float = 60.0,
) -> int:
    """One piece of a run: witnessed as ``<label>:<run id>:<index>`` (its key, if it has one,
    after); the piece ``slow`` takes ``slow_seconds`` at its first attempt; fails for the indexes
    in ``fail``; returns its index."""
    from django_cluster_cron.worker import current_run

    run = current_run()
    assert run is not None, "tests.piece runs only in a run"
    assert run.piece is not None, "tests.piece runs only as a piece"
    shown = f"{label}:{run.pk}:{run.piece.index}"
    if run.piece.key is not None:
        shown += f":{run.piece.key}"
    first_slow = run.piece.index == slow and run.piece.attempt == 1
    _witness(shown, slow_seconds if first_slow else seconds)
    if run.piece.index in (fail or []):
        raise RuntimeError(f"piece {run.piece.index} fails by request")
    return run.piece.index


@shared_task(name="tests.plan")
def plan() -> list[str]:
    """A planner: the keys of the pieces (match ids, say)."""
    return [f"match-{n}" for n in (3, 5, 8, 13)]


@shared_task(name="tests.completed")
def completed(summary: dict[str, Any]) -> str:
    """A completion task: witnessed as ``complete:<run id>:<status>:<counts>``."""
    counts = ",".join(f"{k}={v}" for k, v in sorted(summary["counts"].items()))
    _witness(f"complete:{summary['run']}:{summary['status']}:{counts}", 0.0)
    return str(summary["status"])
