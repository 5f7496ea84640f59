"""The heartbeat of running runs: one thread per worker process stamps all of them, and brings
back the cancels asked for.

While a run's body executes, its ``heartbeat_at`` must move (database time), or the leader
declares the run lost after ``RUN_LOST_AFTER``. One thread per process serves every run the
process is executing — a prefork child runs one at a time, a thread or gevent pool many — with
one statement per beat (:func:`django_cluster_cron.ledger.heartbeats.stamp`), so starting and
ending a run costs a dictionary entry, not a thread. The thread is started on first use in each
process (a forked child starts its own) and has its own database connection, closed after an
error (the next beat reconnects) and whenever a beat finds nothing running (an idle process
holds no connection for it).

A beat matches only rows still executing at the attempt this process executes: a run that has
finished, or that the leader moved on to another attempt elsewhere, is never stamped. The same
statement says which runs have a cancel asked for: the beat marks the run the body sees
(``current_run().cancel_requested``) and, for a job with ``cancel_interrupts``, raises
:class:`~django_cluster_cron.models.RunCancelled` in the body's thread — once, at the next
Python instruction it executes (a body blocked in one long call into C sees it when that call
returns; under gevent or eventlet, whose green threads share one thread, it only marks the run).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connection
from django.utils import timezone

from ..conf import app_settings
from ..ledger.heartbeats import stamp
from ..models import JobPiece, JobRun, RunCancelled

__all__ = ["RunHeartbeat", "beating", "call_beating"]

T = TypeVar("T")

logger = logging.getLogger("django_cluster_cron.worker")


def _green_threads() -> bool:
    """Whether gevent or eventlet patched threading here: their green threads share one thread,
    so an exception raised in "the body's thread" could land in another run's body."""
    gevent = sys.modules.get("gevent.monkey")
    if gevent is not None and gevent.is_module_patched("threading"):
        return True
    eventlet = sys.modules.get("eventlet.patcher")
    return bool(eventlet is not None and eventlet.is_monkey_patched("thread"))


def _raise_in(thread: int, exc: type[BaseException] | None) -> None:
    """Have ``thread`` raise ``exc`` at its next Python instruction (None: take back one that
    it has not raised yet)."""
    raised = ctypes.py_object(exc) if exc is not None else None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), raised)


@dataclasses.dataclass
class _Beating:
    """A run this process executes: its row's instance (the body's ``current_run()``), the
    thread its body runs in, and whether a cancel raises there (and was raised); for a piece of
    the run, the piece's row (what is stamped) is ``piece``."""

    run: JobRun
    thread: int
    interrupts: bool
    interrupted: bool = False
    piece: JobPiece | None = None

    @property
    def key(self) -> tuple[bool, int]:
        """(a piece?, the stamped row's id)."""
        return (True, self.piece.pk) if self.piece is not None else (False, self.run.pk)

    @property
    def attempt(self) -> int:
        return self.piece.attempt if self.piece is not None else self.run.attempt


class _Beater:
    """This process's heartbeat thread and the runs it stamps (run id -> what it beats for)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[bool, int], _Beating] = {}
        self._pid = 0
        self._nudge = threading.Condition(self._lock)
        self._waiting_for = 0.0
        self._thread: threading.Thread | None = None

    def add(self, beating: _Beating) -> None:
        with self._lock:
            if self._pid != os.getpid():  # first use in this process (or a forked copy)
                self._pid = os.getpid()
                self._runs = {}
                self._thread = threading.Thread(
                    target=self._loop, name="cluster-cron-heartbeat", daemon=True
                )
                self._thread.start()
            self._runs[beating.key] = beating
            if self._waiting_for > app_settings.RUN_HEARTBEAT_INTERVAL:
                # The interval was shortened (settings changed while it slept): wait anew.
                self._nudge.notify()

    def remove(self, key: tuple[bool, int]) -> None:
        """Stop beating for the run (or piece: ``key``); a cancel raised for it and not yet
        raised is taken back (after this, nothing is raised in its thread)."""
        with self._lock:
            beating = self._runs.pop(key, None)
            if beating is not None and beating.interrupted:
                _raise_in(beating.thread, None)

    def running(self) -> dict[tuple[bool, int], int]:
        with self._lock:
            return {key: beating.attempt for key, beating in self._runs.items()}

    def _loop(self) -> None:
        try:
            while True:
                interval = app_settings.RUN_HEARTBEAT_INTERVAL
                with self._lock:
                    self._waiting_for = interval
                    nudged = self._nudge.wait(interval)
                    self._waiting_for = 0.0
                    runs = {key: b.attempt for key, b in self._runs.items()}
                if nudged:
                    continue
                if runs:
                    self._beat(runs)
                else:  # nothing running here: hold no database connection while idle
                    connection.close()
        finally:
            connection.close()

    def _beat(self, beating: dict[tuple[bool, int], int]) -> None:
        runs = {row: attempt for (piece, row), attempt in beating.items() if not piece}
        pieces = {row: attempt for (piece, row), attempt in beating.items() if piece}
        try:
            asked = {(False, row): by for row, by in stamp(runs).items()}
            asked.update({(True, row): by for row, by in stamp(pieces, JobPiece).items()})
        except Exception as exc:  # the database may be briefly away: try next beat
            logger.warning("run.heartbeat_failed runs=%s error=%s", sorted(runs), exc)
            # A broken connection stays broken in this thread (nothing else recycles it): drop
            # it so the next beat reconnects, or the runs would look lost.
            connection.close()
            return
        if asked:
            self._deliver(asked)

    def _deliver(self, asked: dict[tuple[bool, int], str]) -> None:
        """Bring the cancels asked for to the bodies still running here."""
        green = _green_threads()
        with self._lock:
            for key, by in asked.items():
                beating = self._runs.get(key)
                if beating is None or beating.interrupted:
                    continue
                run = beating.run
                if run.cancel_requested_at is None:
                    run.cancel_requested_at = timezone.now()
                    run.cancel_requested_by = by
                    logger.warning("run.cancel_seen run=%s by=%s", run.pk, by)
                if beating.interrupts and not green:
                    beating.interrupted = True
                    _raise_in(beating.thread, RunCancelled)


_beater = _Beater()


def beating() -> dict[int, int]:
    """The runs this process is stamping now (run id -> attempt; pieces aside)."""
    return {row: attempt for (piece, row), attempt in _beater.running().items() if not piece}


class RunHeartbeat:
    """Keeps one run's ``heartbeat_at`` moving between :meth:`start` and :meth:`stop`, and
    brings it its cancel (raised in the thread that called :meth:`start` if ``interrupts``)."""

    def __init__(
        self, run: JobRun, *, interrupts: bool = False, piece: JobPiece | None = None
    ) -> None:
        self.beating = _Beating(run, 0, interrupts, piece=piece)
        self.run = run
        self.interrupts = interrupts

    def start(self) -> None:
        self.beating.thread = threading.get_ident()
        _beater.add(self.beating)

    def stop(self) -> None:
        _beater.remove(self.beating.key)


def call_beating(
    run: JobRun, call: Callable[[], T], *, interrupts: bool = False, piece: JobPiece | None = None
) -> T:
    """``call()`` (a run's body, or ``piece``'s of it) while the heartbeat stamps its row; a
    cancel raised in the body by the heartbeat is raised there or not at all (never after this
    returns)."""
    heartbeat = RunHeartbeat(run, interrupts=interrupts, piece=piece)
    heartbeat.start()
    try:
        return call()
    finally:
        while True:
            try:
                heartbeat.stop()
                break
            except RunCancelled:  # raised just as the body ended: the ledger decides its fate
                continue
