"""The state table of a run: for each state, who moves a run out of it, through which function,
and into which state.

This is the one list of every write that changes a run's ``status``; ``RunStatus``'s docstring
and docs/explanation/architecture.md show it (:func:`table`), and the test suite holds the code
to it: a function that writes a status and is not named here fails it, and each per-run
function below is tried from every state to check it leaves only the states it lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models import RunStatus

P, Q, RUN, R = RunStatus.PENDING, RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.RETRYING
T, B = RunStatus.TERMINATING, RunStatus.BUFFERED
WAITING = (P, Q, R)


@dataclass(frozen=True)
class Move:
    """One way a run changes state: out of ``leaves`` into one of ``enters``, made by ``by``
    through ``function`` (its path under ``django_cluster_cron.ledger``)."""

    leaves: tuple[str, ...]
    enters: tuple[str, ...]
    by: str
    function: str


MOVES: tuple[Move, ...] = (
    # Recorded: a slot's row is made, for the leader's schedule or an operator's run.
    Move((), (P, RunStatus.SKIPPED), "leader, operator", "rows.new_run"),
    Move((), (B,), "leader, operator", "rows.new_run"),
    Move((), (P, RunStatus.SKIPPED), "leader", "fastinsert.insert_ignoring_conflicts"),
    Move((), (B,), "leader", "fastinsert.insert_ignoring_conflicts"),
    # Held back by its job's overlap policy: sent in slot order when the runs ahead ended;
    # aged past the catch-up window (missed), dropped with a paused job (skipped).
    Move((B,), (P,), "worker, leader", "buffer.release"),
    Move((B,), (RunStatus.MISSED, RunStatus.SKIPPED), "worker, leader", "buffer.release"),
    # A newer slot of a cancel_other or terminate_other job takes the place of older ones.
    Move((B,), (RunStatus.SKIPPED,), "leader, operator", "buffer.preempt"),
    Move(WAITING, (RunStatus.CANCELLED,), "leader, operator", "buffer.preempt"),
    Move((), (P, RunStatus.UNCERTAIN), "leader", "uncertain.settle_uncertain"),
    # Sent.
    Move((P,), (Q,), "whoever sends it", "outbox.mark_published"),
    Move((P,), (Q,), "leader", "outbox.mark_sent"),
    # Taken by a worker: the claim.
    Move(WAITING, (RUN,), "worker", "statements.claim_run"),
    # Ended by the worker that claimed it (the finish statement, statements.finish_run).
    Move((RUN,), (RunStatus.SUCCESS,), "worker", "transitions.succeeded"),
    Move((RUN,), (RunStatus.FAILED,), "worker", "transitions.failed"),
    Move((RUN,), (R,), "worker", "transitions.retrying"),
    Move((RUN,), (RunStatus.SKIPPED,), "worker", "transitions.skipped"),
    Move((RUN,), (RunStatus.MISSED,), "worker", "transitions.missed"),
    # ... after its cancel was asked for (or while the leader terminates it).
    Move((RUN, T), (RunStatus.CANCELLED,), "worker", "transitions.stopped"),
    # Asked to stop, it outlasted its job's cancel grace: stopped in its worker.
    Move((RUN,), (T,), "leader", "transitions.terminating"),
    # Split into pieces: closed once none is open, by the worker of its last piece or the
    # leader's sweep; re-opened when an operator sends its failed pieces again.
    Move(
        (RUN,),
        (RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.CANCELLED),
        "worker, leader",
        "piece_runs.close_run",
    ),
    Move((RunStatus.SUCCESS, RunStatus.FAILED), (RUN,), "operator", "piece_moves.reopen_run"),
    # Its worker stopped heartbeating: retried or failed, but a run asked to stop is cancelled.
    Move((RUN,), (R, RunStatus.FAILED), "leader", "transitions.lost"),
    Move((RUN, T), (RunStatus.CANCELLED,), "leader", "transitions.lost"),
    # An operator.
    Move((RunStatus.FAILED,), (P,), "operator", "transitions.retried"),
    Move(
        (
            RunStatus.SUCCESS,
            RunStatus.SKIPPED,
            RunStatus.MISSED,
            RunStatus.CANCELLED,
            RunStatus.UNCERTAIN,
        ),
        (P,),
        "operator",
        "transitions.rerun",
    ),
    Move((*WAITING, B), (RunStatus.CANCELLED,), "operator", "transitions.cancelled"),
    # The execution system dropped its message, or cannot run or enqueue its task.
    Move(
        (*WAITING, RUN, T),
        (RunStatus.CANCELLED, RunStatus.MISSED),
        "execution system",
        "transitions.discarded",
    ),
    Move(WAITING, (RunStatus.FAILED,), "worker, send flow", "transitions.unrunnable"),
    # Found never sent after its time, or in doubt after a lossy failover.
    Move((P,), (RunStatus.MISSED,), "leader", "late.settle_unsent"),
    Move((*WAITING, RUN, T), (RunStatus.UNCERTAIN,), "leader", "uncertain.settle_uncertain"),
)

# Helpers that write a status for a function of the table (the test of write paths allows
# them): the worker's endings write through _finish, the sweep's through _lose.
HELPERS = {
    "transitions._finish": "transitions.succeeded",
    "transitions._lose": "transitions.lost",
    "transitions.next_attempt": "transitions.retrying",
    "outbox._mark_queued": "outbox.mark_published",
    "rows.dispatchable_run": "rows.new_run",
    "buffer._release_one": "buffer.release",
}


def _names(states: tuple[str, ...]) -> str:
    return ", ".join(str(state) for state in states)


def table() -> str:
    """The table as text, one line per state left (or recorded) and function: what
    ``RunStatus``'s docstring and the architecture page show."""
    rows = []
    states: list[str | None] = [None, *RunStatus.values]
    for state in states:
        for move in MOVES:
            if (state is None and move.leaves) or (state is not None and state not in move.leaves):
                continue
            left = "(recorded)" if state is None else str(state)
            rows.append((left, _names(move.enters), move.by, move.function))
    # A cell wider than its column keeps a space before the next (lines stay under 100).
    return "\n".join(
        f"{left:<12}→ {into:<18} {who:<17} {function}" for left, into, who, function in rows
    )
