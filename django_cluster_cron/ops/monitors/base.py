"""What a monitor sink receives: a job as a monitor, one check-in of one run, and the interface.

A sink is told about a run twice: when it starts (``in_progress``) and when that attempt ends
(``ok`` or ``error``). Both check-ins carry the same :attr:`CheckIn.check_in_id`, derived from
the run and the attempt alone, so whichever process reports the end — the worker that ran it, or
the leader declaring its worker lost — closes the check-in the worker opened, and a monitoring
service can pair them without any state shared between the two.

Nothing here imports Django or a monitoring library: a project's own sink is a small class.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar, Literal

Status = Literal["in_progress", "ok", "error"]
# What happened to the attempt, in the ledger's words (a sink may treat them differently).
Outcome = Literal["started", "succeeded", "failed", "retrying", "skipped", "lost"]

# Fixed forever: changing it would change every check-in id, and a check-in opened before an
# upgrade could not be closed after it.
CHECK_IN_NAMESPACE = uuid.UUID("5d0c4b6e-3f1a-5b8e-9c2d-7a4e6f1b0c93")


def check_in_id(run_id: int, task_id: str, attempt: int) -> str:
    """The id shared by an attempt's opening and closing check-ins (32 hex digits, a UUID)."""
    return uuid.uuid5(CHECK_IN_NAMESPACE, f"{run_id}:{task_id}:{attempt}").hex


@dataclass(frozen=True)
class Monitor:
    """A job as a monitor sees it.

    ``crontab`` is the job's schedule as a standard 5-field crontab meaning the same fire times,
    or None when it has none; ``interval`` is ``(count, unit)`` for an interval of whole minutes
    (``unit`` one of week, day, hour, minute); ``problem`` says why a job has neither.
    ``margin`` is how late a run may start before its slot counts as missed (the spec's margin
    plus the job's jitter, plus the seconds of a 6-field expression that fires once a minute);
    ``max_runtime`` how long a run may take (the job's hard time limit, else its soft one, else
    the spec's), None for no opinion.
    """

    slug: str
    job: str
    job_id: int
    cron: str
    crontab: str | None
    problem: str
    timezone: str
    margin: timedelta
    max_runtime: timedelta | None
    interval: tuple[int, str] | None = None

    @property
    def has_schedule(self) -> bool:
        return self.crontab is not None or self.interval is not None


@dataclass(frozen=True)
class CheckIn:
    """One check-in of one attempt of one run.

    ``status`` is ``in_progress`` when the attempt starts, then ``ok`` or ``error``;
    ``outcome`` says what the ledger recorded. ``retried`` is True for an error after which the
    run goes again as its next attempt (with a check-in of its own). ``duration`` is the
    attempt's, on a closing check-in; ``error`` the ledger's error text, or "".
    """

    check_in_id: str
    run_id: int
    attempt: int
    slot: datetime
    trigger: str
    status: Status
    outcome: Outcome
    duration: timedelta | None = None
    error: str = ""
    retried: bool = False


class MonitorSink:
    """Where check-ins go. Subclass it and name the class in ``CLUSTER_CRON["MONITORS"]``.

    The spec's options other than the common ones are passed to the constructor as keyword
    arguments. Methods are called in the process where the run's state changed (a Celery worker,
    or the scheduler for a lost run), right after the change is committed: keep them fast and
    hand slow work to a thread. An exception is logged and does not affect the run.
    """

    # True if the sink needs the job's schedule as a crontab (it creates or updates the
    # monitor from it): jobs without one are then warned about and listed.
    uses_schedule: ClassVar[bool] = False

    def started(self, monitor: Monitor, check_in: CheckIn) -> None:
        """An attempt started (``check_in.status == "in_progress"``)."""

    def finished(self, monitor: Monitor, check_in: CheckIn) -> None:
        """An attempt ended: ``ok`` or ``error`` (see ``outcome`` and ``retried``)."""

    def flush(self, timeout: float) -> bool:
        """Send what is queued, waiting at most ``timeout`` seconds; False if time ran out."""
        return True
