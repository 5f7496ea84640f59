"""Which form a run's message takes: the job's own task, or ``execute_run`` for older workers.

From 0.2 a run is sent as its job's own task (name, args, kwargs), with headers naming the run;
the worker side wraps every task's call to claim the run first (:mod:`django_cluster_cron.
worker.around`). A worker of an earlier release would run such a message as a plain call:
without the claim, the overlap gate or the ledger. So while any worker may be older, the leader
sends the old form, ``django_cluster_cron.execute_run(run_id, attempt)``, which every release
runs (new workers keep the task).

``MESSAGE_FORM`` (a setting) chooses: ``"task"`` or ``"execute_run"`` always, or ``"auto"``
(the default): a thread asks the workers which tasks they have (``inspect().registered()``,
at start and every ``MESSAGE_FORM_PROBE_INTERVAL`` seconds) and the job's own task is sent only once
every worker that answers registers :data:`MARKER`, the task that says "I claim job tasks".
No answer (no worker up yet, the broker away) keeps the old form, which is always safe.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery

from ...conf import app_settings

logger = logging.getLogger("django_cluster_cron.scheduler")

# Registered by workers that claim runs sent as the job's own task (django_cluster_cron.tasks).
MARKER = "django_cluster_cron.runs_job_tasks"
PROBE_TIMEOUT = 2.0


def workers_run_job_tasks(registered: dict[str, list[str]] | None) -> bool:
    """Whether the answers to ``inspect().registered()`` allow the job's own task: at least
    one worker answered and every one that did registers :data:`MARKER`."""
    if not registered:
        return False
    return all(MARKER in (names or ()) for names in registered.values())


class FormProbe:
    """The ``auto`` form: asks the workers, in a daemon thread, which form they all run."""

    def __init__(self, app: Celery, interval: float) -> None:
        self.app = app
        self.interval = interval
        self.own_task = False
        self.answered = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cluster-cron-form", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.probe()
            self._stop.wait(self.interval)

    def probe(self) -> None:
        try:
            registered: Any = self.app.control.inspect(timeout=PROBE_TIMEOUT).registered()
        except Exception as exc:  # the broker is away: keep the form we have
            logger.debug("dispatch.form_probe_failed error=%s", exc)
            self.answered.set()
            return
        own = workers_run_job_tasks(registered)
        if own != self.own_task:
            logger.info(
                "dispatch.message_form form=%s workers=%d",
                "task" if own else "execute_run",
                len(registered or {}),
            )
        self.own_task = own
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
