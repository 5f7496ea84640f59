"""The heartbeat of running runs: one thread per worker process stamps all of them.

While a run's body executes, its ``heartbeat_at`` must move (database time), or the leader
declares the run lost after ``RUN_LOST_AFTER``. One thread per process serves every run the
process is executing — a prefork child runs one at a time, a thread or gevent pool many — with
one UPDATE per beat, so starting and ending a run costs a dictionary entry, not a thread. The
thread is started on first use in each process (a forked child starts its own) and has its own
database connection, closed after an error (the next beat reconnects) and whenever a beat finds
nothing running (an idle process holds no connection for it).

A beat matches only rows still ``running`` at the attempt this process executes: a run that has
finished, or that the leader moved on to another attempt elsewhere, is never stamped.
"""

from __future__ import annotations

import functools
import logging
import operator
import os
import threading

from django.db import connection
from django.db.models import Q

from ..conf import app_settings
from ..dbtime import DbNow
from ..models import JobRun, RunStatus

__all__ = ["RunHeartbeat", "beating"]

logger = logging.getLogger("django_cluster_cron.worker")


class _Beater:
    """This process's heartbeat thread and the runs it stamps (run id -> attempt)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[int, int] = {}
        self._pid = 0
        self._nudge = threading.Condition(self._lock)
        self._waiting_for = 0.0
        self._thread: threading.Thread | None = None

    def add(self, run_id: int, attempt: int) -> None:
        with self._lock:
            if self._pid != os.getpid():  # first use in this process (or a forked copy)
                self._pid = os.getpid()
                self._runs = {}
                self._thread = threading.Thread(
                    target=self._loop, name="cluster-cron-heartbeat", daemon=True
                )
                self._thread.start()
            self._runs[run_id] = attempt
            if self._waiting_for > app_settings.RUN_HEARTBEAT_INTERVAL:
                # The interval was shortened (settings changed while it slept): wait anew.
                self._nudge.notify()

    def remove(self, run_id: int) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def running(self) -> dict[int, int]:
        with self._lock:
            return dict(self._runs)

    def _loop(self) -> None:
        try:
            while True:
                interval = app_settings.RUN_HEARTBEAT_INTERVAL
                with self._lock:
                    self._waiting_for = interval
                    nudged = self._nudge.wait(interval)
                    self._waiting_for = 0.0
                    runs = dict(self._runs)
                if nudged:
                    continue
                if runs:
                    self._beat(runs)
                else:  # nothing running here: hold no database connection while idle
                    connection.close()
        finally:
            connection.close()

    def _beat(self, runs: dict[int, int]) -> None:
        match = functools.reduce(
            operator.or_, (Q(pk=run_id, attempt=attempt) for run_id, attempt in runs.items())
        )
        try:
            JobRun.objects.filter(match, status=RunStatus.RUNNING).update(heartbeat_at=DbNow())
        except Exception as exc:  # the database may be briefly away: try next beat
            logger.warning("run.heartbeat_failed runs=%s error=%s", sorted(runs), exc)
            # A broken connection stays broken in this thread (nothing else recycles it): drop
            # it so the next beat reconnects, or the runs would look lost.
            connection.close()


_beater = _Beater()


def beating() -> dict[int, int]:
    """The runs this process is stamping now (run id -> attempt)."""
    return _beater.running()


class RunHeartbeat:
    """Keeps one run's ``heartbeat_at`` moving between :meth:`start` and :meth:`stop`."""

    def __init__(self, run_id: int, attempt: int) -> None:
        self.run_id = run_id
        self.attempt = attempt

    def start(self) -> None:
        _beater.add(self.run_id, self.attempt)

    def stop(self) -> None:
        _beater.remove(self.run_id)
