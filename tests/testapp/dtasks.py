"""``django.tasks`` tasks the suite schedules (Django 6's framework, else the backport's), found
by their import path: ``tests.testapp.dtasks.record``. Bodies write to the witness table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_cluster_cron.djtasks_app import frameworks

# Django 6's @task, else the backport's (typed loosely: the two are different classes).
task: Callable[..., Callable[[Callable[..., Any]], object]] = frameworks()[0].task


@task()
def record(label: str, seconds: float = 0.0) -> int:
    from tests.testapp.tasks import _witness

    return _witness(label, seconds)


@task()
def witness_slot() -> int:
    """Record one execution labelled with the slot it ran for (``<job>@<slot>``)."""
    from django_cluster_cron.worker import current_run
    from tests.testapp.tasks import _witness

    run = current_run()
    assert run is not None
    return _witness(f"{run.job_id}@{run.scheduled_for.isoformat()}", 0)


@task()
def flaky(label: str, failures: int) -> int:
    """Fail the first ``failures`` executions for ``label``, then succeed."""
    from tests.testapp.models import Execution
    from tests.testapp.tasks import _witness

    _witness(label, 0)
    if Execution.objects.filter(label=label).count() <= failures:
        raise RuntimeError(f"{label}: failing on purpose")
    return failures


@task()
def slow_first(label: str, seconds: float) -> int:
    """Sleep ``seconds`` on the first execution for ``label`` only (to be killed mid-run)."""
    from tests.testapp.models import Execution
    from tests.testapp.tasks import _witness

    first = not Execution.objects.filter(label=label).exists()
    return _witness(label, seconds if first else 0)


@task()
def whoami() -> list[Any]:
    """The run this body executes for, as seen through current_run()."""
    from django_cluster_cron.worker import current_run

    run = current_run()
    assert run is not None
    return [run.pk, run.attempt, run.task_id]


@task(takes_context=True)
def with_context(context: Any, label: str) -> str:
    """A task that takes the backend's context: returns the id of the result it runs under."""
    return f"{label}:{context.task_result.id}"


@task()
def unjsonable() -> object:
    """Returns what no backend can store as JSON."""
    return {1, 2}


@task(queue_name="reports")
def in_reports(label: str) -> int:
    from tests.testapp.tasks import _witness

    return _witness(label, 0)


@task(backend="immediate")
def record_at_once(label: str) -> int:
    """On the immediate backend: runs inside enqueue(), in the enqueuing process."""
    from tests.testapp.tasks import _witness

    return _witness(label, 0)


@task()
def add(x: int, y: int) -> int:
    """The benchmarks' trivial body (bench/on_django_tasks.py), as ``tests.add`` is for Celery."""
    return x + y


@task(backend="immediate")
def fail_at_once(label: str) -> None:
    """On the immediate backend (which cannot defer): always fails."""
    from tests.testapp.tasks import _witness

    _witness(label, 0)
    raise RuntimeError(f"{label}: failing on purpose")


@task()
def until_cancelled(label: str, seconds: float = 60.0) -> str:
    """Work until the run's cancel is seen (checked between steps), or ``seconds``."""
    from tests.testapp.tasks import _until_cancelled

    return _until_cancelled(label, seconds, check=True)


@task()
def busy(label: str, seconds: float = 60.0) -> str:
    """Work in short steps for ``seconds`` without looking at any cancel."""
    from tests.testapp.tasks import _until_cancelled

    return _until_cancelled(label, seconds, check=False)


@task()
def piece(label: str, fail: list[int] | None = None) -> int:
    """One piece of a run (``tests.piece``'s twin): witnessed as ``<label>:<run id>:<index>``."""
    from tests.testapp.tasks import piece as celery_piece

    return int(celery_piece.run(label, fail=fail))


@task()
def plan() -> list[str]:
    """A planner among django.tasks tasks."""
    return ["north", "south"]


@task()
def completed(summary: dict[str, Any]) -> str:
    """A completion task among django.tasks tasks."""
    from tests.testapp.tasks import completed as celery_completed

    return str(celery_completed.run(summary))
