"""What a run's execution decides and is given: how it ended (:class:`Outcome`), what the
execution system that delivered it provides (:class:`Delivery`), and database time for its
timestamps (:class:`RunTimer`)."""

from __future__ import annotations

import dataclasses
import enum
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from ..dispatch import Dispatcher


class Ending(enum.Enum):
    """How a claimed run ended, as the worker decides it before anything is written."""

    SUCCESS = "success"  # the body returned
    FAILURE = "failure"  # it failed: retried if attempts remain
    FINAL = "final"  # it failed and no retry can fix it
    SKIPPED = "skipped"  # refused (overlap policy) or the task chose not to work: no body
    MISSED = "missed"  # found too late for its job's catch-up policy: the body did not run
    CANCELLED = "cancelled"  # the body stopped for the cancel asked for (RunCancelled)
    SPLIT = "split"  # split into pieces instead of running the body: they carry the run now


@dataclasses.dataclass
class Outcome:
    """How a claimed run ended: the ending, and what goes with it."""

    ending: Ending
    result: Any = None
    error: BaseException | None = None
    trace: str = ""
    reason: str = ""
    # Why its slot did not run, when a policy refused it (cluster_cron_slots_not_run_total).
    not_run: str = ""

    @property
    def body_ran(self) -> bool:
        return self.ending not in (Ending.SKIPPED, Ending.MISSED)


def failure(exc: BaseException, ending: Ending = Ending.FAILURE) -> Outcome:
    """The outcome of ``exc`` raised now (its traceback is the one being handled)."""
    return Outcome(ending, error=exc, trace=traceback.format_exc())


def _never() -> bool:
    return False


def _no_judgement(exc: Exception) -> Outcome | None:
    return None


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What the execution system that delivered a run gives its execution.

    ``dispatcher`` sends the run's next attempt (the way this attempt came); ``traceparent`` is
    the dispatch trace its message carried; ``terminating`` says whether this process is being
    ended (a body interrupted by that neither finished nor failed); ``judge`` reads an exception
    of the system's own (None: an ordinary failure); ``record_again``: exceptions that may
    interrupt the record itself (a time limit), after which it is written again.
    """

    dispatcher: Callable[[], Dispatcher]
    traceparent: object = None
    terminating: Callable[[], bool] = _never
    judge: Callable[[Exception], Outcome | None] = _no_judgement
    record_again: tuple[type[BaseException], ...] = ()


class RunTimer:
    """Database time for a run's timestamps, whatever the worker's own clock says.

    The claim stamps ``started_at`` with the database's clock; from then on "now" in database
    time is that start plus the time this process measured since (a monotonic clock), so a
    worker whose clock is off still writes retry times the leader compares correctly.
    """

    def __init__(self, started_at: datetime) -> None:
        self.started_at = started_at
        self._start = time.monotonic()

    def elapsed(self) -> timedelta:
        return timedelta(seconds=time.monotonic() - self._start)

    def now(self) -> datetime:
        return self.started_at + self.elapsed()
