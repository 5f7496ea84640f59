"""``django.tasks`` tasks on django-tasks-rq's backend (alias "rq"), for the tox environment
that has it (tests/cluster/test_django_tasks_rq.py). Bodies write to the witness table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_cluster_cron.djtasks_app import frameworks

task: Callable[..., Callable[[Callable[..., Any]], object]] = frameworks()[0].task


@task(backend="rq")
def record(label: str, seconds: float = 0.0) -> int:
    from tests.testapp.tasks import _witness

    return _witness(label, seconds)


@task(backend="rq")
def flaky(label: str, failures: int) -> int:
    """Fail the first ``failures`` executions for ``label``, then succeed."""
    from tests.testapp.models import Execution
    from tests.testapp.tasks import _witness

    _witness(label, 0)
    if Execution.objects.filter(label=label).count() <= failures:
        raise RuntimeError(f"{label}: failing on purpose")
    return failures
