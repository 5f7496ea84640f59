"""The ``auto`` message form's vote over successive probes: a worker that answers one probe
late is still there, and the job's own task is sent only while every worker claims it."""

from __future__ import annotations

from collections.abc import Mapping

from django_cluster_cron.dispatch.celery.forms import (
    AGREE,
    CONFIRM_PAUSE,
    FORGET_AFTER,
    MARKER,
    FormVote,
)

NEW = ["tests.add", MARKER]
OLD = ["tests.add", "django_cluster_cron.execute_run"]


def vote_over(*probes: Mapping[str, list[str] | None] | None) -> FormVote:
    vote = FormVote()
    for registered in probes:
        vote.count(registered)
    return vote


def test_the_jobs_task_only_after_agreeing_probes_in_a_row():
    vote = FormVote()
    for _ in range(AGREE - 1):
        vote.count({"new@a": NEW})
        assert not vote.own_task
    vote.count({"new@a": NEW})
    assert vote.own_task


def test_no_answer_keeps_the_old_form_and_breaks_the_streak():
    assert not vote_over(None, {}, None).own_task
    assert not vote_over(*[{"new@a": NEW}] * (AGREE - 1), None, {"new@a": NEW}).own_task


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
    assert not vote_over(*agreed, rolled_back).own_task
    # Silent for fewer than FORGET_AFTER probes: still remembered.
    assert not vote_over(*agreed, rolled_back, *agreed).own_task


def test_a_worker_whose_answer_lists_nothing_is_taken_as_old():
    assert not vote_over(*[{"new@b": NEW, "odd@c": []}] * AGREE).own_task
    assert not vote_over(*[{"new@b": NEW, "odd@c": None}] * AGREE).own_task


def test_an_agreeing_streak_is_confirmed_quickly_then_the_interval_returns():
    vote = FormVote()
    pauses = []
    for _ in range(AGREE + 1):
        vote.count({"new@a": NEW})
        pauses.append(vote.pause(30.0))
    assert pauses == [CONFIRM_PAUSE] * (AGREE - 1) + [30.0, 30.0]
    confirming = vote_over({"new@a": NEW})
    assert confirming.pause(0.5) == 0.5  # never longer than the interval
    vote.count({"new@a": NEW, "old@b": OLD})
    assert vote.pause(30.0) == 30.0  # no streak: the interval
