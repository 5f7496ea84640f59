"""The run signals, turned into check-ins for every sink that watches the run's job.

What each signal means to a monitor (docs/how-to/monitors.md says the same for operators):

* ``run_started`` — ``in_progress``: the attempt's check-in opens.
* ``run_succeeded`` — ``ok`` with the attempt's duration.
* ``run_failed`` — ``error``: the last attempt failed (or the run was refused: an invalid job, a
  task the worker does not know), or its worker was lost with no retry left.
* ``run_retrying`` — ``error`` for the attempt that failed (``retried=True``). Each attempt ran,
  took its own time and ended: its check-in closes, and the next attempt opens its own. Keeping
  one check-in open across the back-off would count the wait as run time against
  ``max_runtime``; a service that should not raise an issue for a failure a retry may repair is
  told so by its own threshold (Sentry's ``failure_issue_threshold``).
* ``run_skipped`` — ``ok`` (``outcome="skipped"``): the overlap policy, or the task raising
  ``Ignore``, decided the slot as the job's owner asked. The slot is accounted for, so a
  service does not report it missed; a run that overlaps for too long shows as its own run's
  timeout.
* ``run_lost`` — ``error`` for the attempt whose worker stopped heartbeating (sent by the
  scheduler). ``run_failed`` follows it when no retry is left; the check-in is closed once.

The check-in id is the attempt's (:func:`.base.check_in_id`): a retried run's signal carries the
run already moved to its next attempt, so the failed one is ``attempt - 1``.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from ... import signals
from ...models import JobRun
from .base import CheckIn, Outcome, Status, check_in_id
from .describe import monitor_for, warn_once
from .specs import watches

logger = logging.getLogger("django_cluster_cron.monitors")

# Check-ins closed by this process, newest last: a second close of one is dropped.
CLOSED_REMEMBERED = 4096


class _Closed:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: OrderedDict[str, None] = OrderedDict()

    def first(self, key: str) -> bool:
        with self.lock:
            if key in self.ids:
                return False
            self.ids[key] = None
            if len(self.ids) > CLOSED_REMEMBERED:
                self.ids.popitem(last=False)
            return True


_closed = _Closed()


def report(run: JobRun, outcome: Outcome, *, attempt: int, retried: bool = False) -> None:
    """Tell every sink that watches the run's job; a sink that raises is logged and skipped."""
    found = watches()
    if not found:
        return
    job = run.job
    status: Status = "ok" if outcome in ("succeeded", "skipped") else "error"
    if outcome == "started":
        status = "in_progress"
    check_in = CheckIn(
        check_in_id=check_in_id(run.pk, run.task_id, attempt),
        run_id=run.pk,
        attempt=attempt,
        slot=run.scheduled_for,
        trigger=run.trigger,
        status=status,
        outcome=outcome,
        duration=None if status == "in_progress" else run.duration,
        error=run.error if status == "error" else "",
        retried=retried,
    )
    if status != "in_progress" and not _closed.first(check_in.check_in_id):
        return
    for watch in found:
        if not watch.watches(job.name, run.trigger):
            continue
        try:
            monitor = monitor_for(job, watch)
            warn_once(watch, monitor)
            if status == "in_progress":
                watch.sink.started(monitor, check_in)
            else:
                watch.sink.finished(monitor, check_in)
        except Exception:
            logger.exception(
                "monitors.sink_failed sink=%s run=%s status=%s", watch.label, run.pk, status
            )


def _started(sender: Any, run: JobRun, **extra: Any) -> None:
    report(run, "started", attempt=run.attempt)


def _succeeded(sender: Any, run: JobRun, **extra: Any) -> None:
    report(run, "succeeded", attempt=run.attempt)


def _failed(sender: Any, run: JobRun, **extra: Any) -> None:
    report(run, "failed", attempt=run.attempt)


def _retrying(sender: Any, run: JobRun, **extra: Any) -> None:
    report(run, "retrying", attempt=run.attempt - 1, retried=True)


def _skipped(sender: Any, run: JobRun, **extra: Any) -> None:
    report(run, "skipped", attempt=run.attempt)


def _lost(sender: Any, run: JobRun, retried: bool = False, **extra: Any) -> None:
    report(run, "lost", attempt=run.attempt - 1 if retried else run.attempt, retried=retried)


RECEIVERS = (
    (signals.run_started, _started),
    (signals.run_succeeded, _succeeded),
    (signals.run_failed, _failed),
    (signals.run_retrying, _retrying),
    (signals.run_skipped, _skipped),
    (signals.run_lost, _lost),
)


def connect() -> None:
    """Hear the run signals (idempotent)."""
    for signal, receiver in RECEIVERS:
        signal.connect(receiver, dispatch_uid=f"cluster_cron_monitors_{receiver.__name__}")


def disconnect() -> None:
    for signal, receiver in RECEIVERS:
        signal.disconnect(receiver, dispatch_uid=f"cluster_cron_monitors_{receiver.__name__}")


def flush(timeout: float = 5.0) -> bool:
    """Ask every sink to send what it holds; False if one ran out of ``timeout`` seconds."""
    return all([watch.sink.flush(timeout) for watch in watches()])
