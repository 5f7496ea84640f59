"""The run a job's body executes, for the body to ask: :func:`current_run`."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from ..models import JobRun

__all__ = ["current_run", "running_as"]

_current_run: contextvars.ContextVar[JobRun | None] = contextvars.ContextVar(
    "cluster_cron_current_run", default=None
)


def current_run() -> JobRun | None:
    """The run being executed, inside a job's task body (``None`` elsewhere).

    Lets a task know which slot and attempt it runs for, e.g. to make its side effects
    idempotent per slot: ``run = current_run(); key = (run.job_id, run.scheduled_for)``. In a
    piece of a run, ``current_run().piece`` says which (index, key, count).
    """
    return _current_run.get()


@contextlib.contextmanager
def running_as(run: JobRun) -> Iterator[None]:
    """:func:`current_run` is ``run`` inside the block."""
    token = _current_run.set(run)
    try:
        yield
    finally:
        _current_run.reset(token)
