"""The ``auto`` message form's vote over successive probes: a worker that answers one probe
late is still there, the job's own task is sent only while every worker claims it, and the
decision is the cluster's — a new cluster's first answer makes it, a restarting worker or a new
leader does not undo it, only a worker answering without the marker does."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from django_cluster_cron.coordination.counters import MemoryCounters
from django_cluster_cron.dispatch.celery.forms import (
    AGREE,
    CONFIRM_PAUSE,
    ELSEWHERE,
    FIRST_ANSWER_PAUSE,
    FORGET_AFTER,
    MARKER,
    OLD_FORM,
    OWN_TASK,
    REMEMBERED,
    UNDECIDED,
    FormProbe,
    FormVote,
)

NEW = ["tests.add", MARKER]
OLD = ["tests.add", "django_cluster_cron.execute_run"]


def vote_over(*probes: Mapping[str, list[str] | None] | None, remembered=UNDECIDED) -> FormVote:
    vote = FormVote(remembered=remembered)
    for registered in probes:
        vote.count(registered)
    return vote


def test_in_a_new_cluster_the_first_answer_decides():
    vote = FormVote()
    assert vote.remembered == UNDECIDED  # the old form
    vote.count({"new@a": NEW})
    assert vote.own_task
    assert vote.remembered == OWN_TASK


def test_where_an_old_worker_was_heard_the_jobs_task_takes_agreeing_probes_in_a_row():
    vote = vote_over({"w@a": OLD})  # then restarted on the new release
    for _ in range(AGREE - 1):
        vote.count({"w@a": NEW})
        assert not vote.own_task
    vote.count({"w@a": NEW})
    assert vote.own_task


def test_no_answer_keeps_the_old_form_and_breaks_the_streak():
    assert not vote_over(None, {}, None).own_task
    heard_old = {"w@a": OLD}
    assert not vote_over(heard_old, *[{"w@a": NEW}] * (AGREE - 1), None, {"w@a": NEW}).own_task


def test_no_answer_never_undoes_a_decision():
    """A worker restarting (or every worker, in a deploy) answers nothing for a while: the
    cluster keeps sending the job's task."""
    vote = vote_over({"new@a": NEW}, None, {}, None)
    assert vote.own_task
    vote.count({"new@a-restarted": NEW})
    assert vote.own_task


def test_an_old_worker_that_misses_a_probe_still_holds_the_old_form():
    # The old worker answers, then is too slow for the next probes while a new one answers.
    vote = vote_over({"old@a": OLD, "new@b": NEW}, *[{"new@b": NEW}] * (FORGET_AFTER - 1))
    assert vote.old == {"old@a": FORGET_AFTER - 1}
    assert not vote.own_task


def test_an_old_worker_silent_for_long_enough_counts_as_gone():
    vote = FormVote()
    vote.count({"old@a": OLD, "new@b": NEW})
    silent = [vote.count({"new@b": NEW}) for _ in range(FORGET_AFTER)]
    assert silent == [{"old@a": probes} for probes in range(1, FORGET_AFTER + 1)]
    assert vote.old == {}
    assert not vote.own_task  # the forgetting probe starts the streak
    for _ in range(AGREE - 1):
        vote.count({"new@b": NEW})
    assert vote.own_task


def test_an_old_worker_restarted_on_the_new_release_is_forgotten_at_once():
    vote = vote_over({"w@a": OLD}, *[{"w@a": NEW}] * AGREE)
    assert vote.old == {}
    assert vote.own_task


def test_one_old_answer_goes_back_to_the_old_form_at_once():
    agreed = [{"new@b": NEW}] * AGREE
    assert vote_over(*agreed).own_task
    rolled_back = {"new@b": NEW, "rolled-back@c": OLD}
    back = vote_over(*agreed, rolled_back)
    assert not back.own_task
    assert back.remembered == OLD_FORM
    # Silent for fewer than FORGET_AFTER probes: still remembered.
    assert not vote_over(*agreed, rolled_back, *agreed).own_task


def test_a_worker_whose_answer_lists_nothing_is_taken_as_old():
    assert not vote_over(*[{"new@b": NEW, "odd@c": []}] * AGREE).own_task
    assert not vote_over(*[{"new@b": NEW, "odd@c": None}] * AGREE).own_task


def test_a_new_cluster_asks_every_few_seconds_until_a_first_answer():
    vote = FormVote()
    assert vote.pause(30.0) == FIRST_ANSWER_PAUSE
    vote.count(None)
    assert vote.pause(30.0) == FIRST_ANSWER_PAUSE
    vote.count({"new@a": NEW})
    assert vote.pause(30.0) == 30.0
    assert FormVote().pause(0.5) == 0.5  # never longer than the interval


def test_an_agreeing_streak_is_confirmed_quickly_then_the_interval_returns():
    vote = vote_over({"w@a": OLD})
    pauses = []
    for _ in range(AGREE + 1):
        vote.count({"w@a": NEW})
        pauses.append(vote.pause(30.0))
    assert pauses == [CONFIRM_PAUSE] * (AGREE - 1) + [30.0, 30.0]
    confirming = vote_over({"w@a": OLD}, {"w@a": NEW})
    assert confirming.pause(0.5) == 0.5  # never longer than the interval
    vote.count({"new@a": NEW, "old@b": OLD})
    assert vote.pause(30.0) == 30.0  # no streak: the interval


# -- the cluster's decision, remembered --------------------------------------------------------


def test_a_vote_that_begins_with_the_jobs_task_remembered_sends_it_at_once():
    vote = FormVote(remembered=OWN_TASK)
    assert vote.own_task
    vote.count(None)  # no worker answering the new leader's first probe
    assert vote.own_task


def test_a_vote_that_begins_with_the_old_form_remembered_waits_as_if_it_had_heard_one():
    vote = FormVote(remembered=OLD_FORM)
    assert vote.old == {ELSEWHERE: 0}
    assert not vote_over(
        *[{"new@a": NEW}] * (FORGET_AFTER + AGREE - 2), remembered=OLD_FORM
    ).own_task
    assert vote_over(*[{"new@a": NEW}] * (FORGET_AFTER + AGREE - 1), remembered=OLD_FORM).own_task


def test_another_nodes_old_form_is_adopted_and_its_jobs_task_where_undecided():
    vote = vote_over({"new@a": NEW})
    vote.adopt(OLD_FORM)
    assert not vote.own_task
    assert ELSEWHERE in vote.old
    undecided = FormVote()
    undecided.adopt(OWN_TASK)
    assert undecided.own_task
    heard_old = vote_over({"old@b": OLD})
    heard_old.adopt(OWN_TASK)  # its own evidence wins
    assert not heard_old.own_task


class Inspect:
    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.lock = threading.Lock()

    def registered(self) -> Any:
        with self.lock:
            return self.answers[0]


class App:
    """What FormProbe uses of a Celery app: ``control.inspect(timeout).registered()``."""

    def __init__(self, answer: Any) -> None:
        self.inspect_ = Inspect([answer])
        self.control = self

    def inspect(self, timeout: float) -> Inspect:
        return self.inspect_


def probe_of(app: App, counters: MemoryCounters) -> FormProbe:
    probe = FormProbe(app, 3600.0, counters)  # type: ignore[arg-type]
    assert probe.answered.wait(10)
    probe.stop()
    return probe


def test_the_decision_is_remembered_where_every_node_reads_it():
    counters = MemoryCounters()
    first = probe_of(App({"new@a": NEW}), counters)
    assert first.own_task
    assert counters.value(REMEMBERED) == OWN_TASK
    # A new leader (a failover, a deploy) while the workers are restarting: none answers.
    successor = probe_of(App(None), counters)
    assert successor.own_task
    # A worker without the marker: the cluster goes back, and a later leader starts there.
    rolled_back = probe_of(App({"new@a": NEW, "old@b": OLD}), counters)
    assert not rolled_back.own_task
    assert counters.value(REMEMBERED) == OLD_FORM
    later = probe_of(App({"new@a": NEW}), counters)
    assert not later.own_task
    # The node that had decided the job's task hears of it at its next probe.
    first.probe()
    assert not first.own_task
