"""Which form a run's message takes: the job's own task, or ``execute_run`` for older workers.

From 0.2 a run is sent as its job's own task (name, args, kwargs), with headers naming the run;
the worker side wraps every task's call to claim the run first (:mod:`django_cluster_cron.
worker.around`). A worker of an earlier release would run such a message as a plain call:
without the claim, the overlap gate or the ledger. So while any worker may be older, the leader
sends the old form, ``django_cluster_cron.execute_run(run_id, attempt)``, which every release
runs (new workers keep the task).

``MESSAGE_FORM`` (a setting) chooses: ``"task"`` or ``"execute_run"`` always, or ``"auto"``
(the default): a thread asks the workers which tasks they have (``inspect().registered()``,
at start and every ``MESSAGE_FORM_PROBE_INTERVAL`` seconds) and the job's own task is sent only
once every worker registers :data:`MARKER`, the task that says "I claim job tasks".

A worker that is slow to answer (a loaded host, a busy event loop) is not a worker that is gone,
so one probe's answers are not enough (:class:`FormVote`): a worker heard without the marker is
remembered until it answers with it (restarted on the new release) or has been silent for
:data:`FORGET_AFTER` probes in a row, and the job's task is sent only after :data:`AGREE`
probes in a row found every worker answering with the marker and none remembered without it.
No answer (no worker up yet, the broker away) keeps the old form, which is always safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from celery import Celery

from ...conf import app_settings

logger = logging.getLogger("django_cluster_cron.scheduler")

# Registered by workers that claim runs sent as the job's own task (django_cluster_cron.tasks).
MARKER = "django_cluster_cron.runs_job_tasks"
PROBE_TIMEOUT = 2.0


# Probes in a row a worker heard without MARKER must stay silent before it counts as gone.
FORGET_AFTER = 10
# Probes in a row that must allow the job's own task before the leader sends it; once one has,
# the next come after CONFIRM_PAUSE seconds (not the interval), so a leader that starts in an
# upgraded cluster sends the job's task within seconds.
AGREE = 3
CONFIRM_PAUSE = 1.0


class FormVote:
    """The ``auto`` form's decision from successive probes' answers (pure; no Celery)."""

    def __init__(self, forget_after: int = FORGET_AFTER, agree: int = AGREE) -> None:
        self.forget_after = forget_after
        self.agree = agree
        self.old: dict[str, int] = {}  # hostname heard without MARKER -> probes silent since
        self.streak = 0
        self.own_task = False

    def count(self, registered: Mapping[str, Iterable[str] | None] | None) -> dict[str, int]:
        """Take one probe's answers (``inspect().registered()``; None or {} when none came).
        Returns the workers heard without the marker that were silent this time, each with
        its probes silent in a row; those at :attr:`forget_after` are forgotten."""
        answers = registered or {}
        silent = {}
        for host in list(self.old):
            if host not in answers:
                silent[host] = self.old[host] = self.old[host] + 1
                if self.old[host] >= self.forget_after:
                    del self.old[host]
        for host, names in answers.items():
            if MARKER in (names or ()):
                self.old.pop(host, None)
            else:
                self.old[host] = 0
        allowed = bool(answers) and not self.old
        self.streak = self.streak + 1 if allowed else 0
        self.own_task = self.streak >= self.agree
        return silent

    def pause(self, interval: float) -> float:
        """Seconds until the next probe: ``interval``, shorter while a streak is confirming."""
        confirming = 0 < self.streak < self.agree
        return min(interval, CONFIRM_PAUSE) if confirming else interval


class FormProbe:
    """The ``auto`` form: asks the workers, in a daemon thread, which form they all run."""

    def __init__(self, app: Celery, interval: float) -> None:
        self.app = app
        self.interval = interval
        self.vote = FormVote()
        self.answered = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cluster-cron-form", daemon=True)
        self._thread.start()

    @property
    def own_task(self) -> bool:
        return self.vote.own_task

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.probe()
            self._stop.wait(self.vote.pause(self.interval))

    def probe(self) -> None:
        try:
            registered: Any = self.app.control.inspect(timeout=PROBE_TIMEOUT).registered()
        except Exception as exc:  # the broker is away: keep the form we have
            logger.debug("dispatch.form_probe_failed error=%s", exc)
            self.answered.set()
            return
        before = self.vote.own_task
        for host, probes in self.vote.count(registered).items():
            gone = probes >= self.vote.forget_after
            logger.info(
                "dispatch.form_worker_%s worker=%s silent_probes=%d",
                "gone" if gone else "silent",
                host,
                probes,
            )
        if self.vote.own_task != before:
            logger.info(
                "dispatch.message_form form=%s workers=%d",
                "task" if self.vote.own_task else "execute_run",
                len(registered or {}),
            )
        self.answered.set()

    def stop(self) -> None:
        self._stop.set()


_probes: dict[int, FormProbe] = {}
_probes_lock = threading.Lock()


def own_task_form(app: Celery) -> bool:
    """Whether runs go out now as their job's own task (see the module's docstring)."""
    form = app_settings.MESSAGE_FORM
    if form != "auto":
        return bool(form == "task")
    probe = _probes.get(id(app))
    if probe is None:
        with _probes_lock:
            probe = _probes.get(id(app))
            if probe is None:
                interval = app_settings.MESSAGE_FORM_PROBE_INTERVAL
                probe = _probes[id(app)] = FormProbe(app, interval)
    return probe.own_task
