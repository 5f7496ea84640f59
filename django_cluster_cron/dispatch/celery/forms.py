"""Which form a run's message takes: the job's own task, or ``execute_run`` for older workers.

From 0.2 a run is sent as its job's own task (name, args, kwargs), with headers naming the run;
the worker side wraps every task's call to claim the run first (:mod:`django_cluster_cron.
worker.celery`). A worker of an earlier release would run such a message as a plain call:
without the claim, the overlap gate or the ledger. So while any worker may be older, the leader
sends the old form, ``django_cluster_cron.execute_run(run_id, attempt)``, which every release
runs (new workers keep the task).

``MESSAGE_FORM`` (a setting) chooses: ``"task"`` or ``"execute_run"`` always, or ``"auto"``
(the default): a thread of the leader asks the workers which tasks they have
(``inspect().registered()``) and the job's own task is sent once every worker answering registers
:data:`MARKER`, the task that says "I claim job tasks".

The decision is the cluster's, not one process's: it is remembered where the nodes share their
counters (:mod:`django_cluster_cron.coordination`), so a new leader (a failover, a deploy) starts
with it, and a worker that restarts or misses a probe changes nothing. Only a worker that answers
*without* the marker sends the cluster back to the old form (:class:`FormVote`): it is remembered
until it answers with it (restarted on the new release) or has been silent for
:data:`FORGET_AFTER` probes in a row. In a cluster where no such worker was ever heard (a new
install) the first answer decides; in one where one was (a rolling upgrade), the job's task is
sent again only after :data:`AGREE` probes in a row found every worker answering with the marker
and none remembered without it. Until a first answer (no worker up yet, the broker away) the old
form goes, which is always safe, and the leader asks every :data:`FIRST_ANSWER_PAUSE` seconds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from celery import Celery

from ...conf import app_settings
from ...coordination import Counters, get_coordination

logger = logging.getLogger("django_cluster_cron.scheduler")

# Registered by workers that claim runs sent as the job's own task (django_cluster_cron.tasks).
MARKER = "django_cluster_cron.runs_job_tasks"
PROBE_TIMEOUT = 2.0


# Probes in a row a worker heard without MARKER must stay silent before it counts as gone.
FORGET_AFTER = 10
# In a cluster where a worker without MARKER was heard, probes in a row that must allow the job's
# own task before the leader sends it again; once one has, the next come after CONFIRM_PAUSE
# seconds (not the interval).
AGREE = 3
CONFIRM_PAUSE = 1.0
# Until a first worker answers, the leader asks this often (seconds; never more than the interval).
FIRST_ANSWER_PAUSE = 2.0

# What the cluster remembers (a shared counter, see the module): never decided, the job's own
# task, or the old form since a worker without MARKER was heard.
REMEMBERED = "message_form"
UNDECIDED, OWN_TASK, OLD_FORM = 0, 1, 2


# Stands, in a vote, for a worker another node heard without MARKER (the cluster remembers the
# old form): remembered and forgotten like one this node heard.
ELSEWHERE = "(heard by another node)"


class FormVote:
    """The ``auto`` form's decision from successive probes' answers (pure; no Celery).

    ``remembered`` is the cluster's decision when the vote begins (:data:`OWN_TASK`,
    :data:`OLD_FORM` or :data:`UNDECIDED`); :attr:`remembered` is what it is now.
    """

    def __init__(
        self, forget_after: int = FORGET_AFTER, agree: int = AGREE, remembered: int = UNDECIDED
    ) -> None:
        self.forget_after = forget_after
        self.agree = agree
        self.old: dict[str, int] = {}  # hostname heard without MARKER -> probes silent since
        self.streak = 0
        self.own_task = remembered == OWN_TASK
        # A worker without the marker was heard in this cluster: agreeing takes AGREE probes.
        self.old_seen = False
        self.answered = self.own_task
        if remembered == OLD_FORM:
            self._heard_elsewhere()

    def _heard_elsewhere(self) -> None:
        self.old.setdefault(ELSEWHERE, 0)
        self.old_seen = True
        self.own_task = False
        self.streak = 0

    @property
    def remembered(self) -> int:
        if self.own_task:
            return OWN_TASK
        return OLD_FORM if self.old_seen else UNDECIDED

    def adopt(self, remembered: int) -> None:
        """Take the cluster's decision as another node left it. The old form where this vote
        sends the job's task: that node heard a worker without the marker since (remembered
        here as one more such worker). The job's task where this vote, remembering no such
        worker, has not decided yet."""
        if remembered == OLD_FORM and self.own_task:
            self._heard_elsewhere()
        elif remembered == OWN_TASK and not self.own_task and not self.old:
            self.own_task = self.answered = True

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
                self.old_seen = True
        self.answered = self.answered or bool(answers)
        if self.old:  # one worker that would run a job's task as a plain call: the old form
            self.streak = 0
            self.own_task = False
        elif answers and not self.own_task:
            self.streak += 1
            self.own_task = self.streak >= (self.agree if self.old_seen else 1)
        elif not self.own_task:
            self.streak = 0  # no answer breaks a streak; it never undoes a decision
        return silent

    def pause(self, interval: float) -> float:
        """Seconds until the next probe: ``interval``; shorter before a first answer, and while
        a streak is confirming."""
        if not self.answered:
            return min(interval, FIRST_ANSWER_PAUSE)
        confirming = not self.own_task and 0 < self.streak < self.agree
        return min(interval, CONFIRM_PAUSE) if confirming else interval


class FormProbe:
    """The ``auto`` form: asks the workers, in a daemon thread, which form they all run."""

    def __init__(self, app: Celery, interval: float, counters: Counters | None = None) -> None:
        self.app = app
        self.interval = interval
        self.counters = counters
        self.vote = FormVote(remembered=self._recall())
        if self.vote.own_task:
            logger.info("dispatch.message_form form=task remembered=1")
        self.answered = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cluster-cron-form", daemon=True)
        self._thread.start()

    @property
    def own_task(self) -> bool:
        return self.vote.own_task

    def _recall(self) -> int:
        """The cluster's remembered decision (UNDECIDED when it cannot be read)."""
        if self.counters is None:
            return UNDECIDED
        try:
            found = self.counters.value(REMEMBERED)
        except Exception as exc:  # the store is away: decide from the probes
            logger.debug("dispatch.form_recall_failed error=%s", exc)
            return UNDECIDED
        return found if found in (OWN_TASK, OLD_FORM) else UNDECIDED

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
        stored = self._recall()
        self.vote.adopt(stored)
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
        if self.vote.remembered != stored and self.counters is not None:
            self.counters.put(REMEMBERED, self.vote.remembered)
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
                counters = get_coordination().counters
                probe = _probes[id(app)] = FormProbe(app, interval, counters)
    return probe.own_task
