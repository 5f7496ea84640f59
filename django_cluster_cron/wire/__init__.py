"""The wire: how a run is named in the messages of each execution system, written once for the
side that sends (:mod:`django_cluster_cron.dispatch`) and the side that receives
(:mod:`django_cluster_cron.worker`).

* :mod:`.celery` — the headers of a run's Celery message, and the form workers before 0.2 read;
* :mod:`.djtasks` — the keyword arguments of the wrapper task a ``django.tasks`` backend runs.

Whatever the system, a message names a run by its id, its attempt and its task id; the receiving
side reads them with :func:`run_ref`, the one check of what a message says it is for.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunRef", "is_id", "piece_index", "run_ref"]

# The indexes a piece's message may name: -1 (the completion message) up to the cap.
PIECE_INDEXES = range(-1, 10_000)


def is_id(value: object) -> bool:
    """A row id or an attempt number as a message carries it: a positive 64-bit integer."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


@dataclass(frozen=True)
class RunRef:
    """The run a delivered message is for: its id, the attempt the message carries and the task
    id it was sent with (what the claim matches)."""

    run_id: int
    attempt: int
    task_id: str


def run_ref(run_id: object, attempt: object, task_id: object) -> RunRef | None:
    """The run a message names, or None when it names none (a forged or corrupted message: its
    run id or attempt is not a positive integer, or it has no task id)."""
    if not (is_id(run_id) and is_id(attempt) and isinstance(task_id, str) and task_id):
        return None
    assert isinstance(run_id, int)
    assert isinstance(attempt, int)
    return RunRef(run_id, attempt, task_id)


def piece_index(value: object) -> int | None:
    """The piece a message names (its index), or None when it names none well formed."""
    if isinstance(value, int) and not isinstance(value, bool) and value in PIECE_INDEXES:
        return value
    return None
