"""Overlap policy where a run is recorded: may one more run of a job go now, wait its turn, or
not run at all — and must the job's active runs stop for it?

Pure: the caller counts the job's runs ahead of this one (``running``: executing, not finished;
``waiting``: recorded or queued but not started, including runs waiting for a retry;
``buffered``: recorded behind them, held back until they end).

The policies are Temporal's schedules' six:

* ``allow`` — every run goes at once, overlapping freely;
* ``skip`` — a slot whose previous run is still waiting, buffered or running is skipped;
* ``buffer_one`` — at most one run waits behind the running one (it is sent and waits at the
  worker for the job's execution lock); any further one is skipped;
* ``buffer_all`` — runs wait behind the running one, held back in the ledger and started one at
  a time in slot order, at most ``max_buffered`` of them; an overflow is skipped ("buffer full");
* ``cancel_other`` — the running run is asked to stop (its cooperative cancel), runs still
  waiting are cancelled, and the new run waits until they have ended; only the newest slot
  waits (a newer one supersedes it);
* ``terminate_other`` — the same, but the running run is terminated at once (only where its
  worker's pool can: Celery's prefork, eventlet, gevent).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OverlapPolicy(str, enum.Enum):
    ALLOW = "allow"
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    BUFFER_ALL = "buffer_all"
    CANCEL_OTHER = "cancel_other"
    TERMINATE_OTHER = "terminate_other"


# Policies whose waiting runs are held back in the ledger (status ``buffered``) and released
# one at a time when the runs ahead of them have ended.
BUFFERING = frozenset(
    {OverlapPolicy.BUFFER_ALL, OverlapPolicy.CANCEL_OTHER, OverlapPolicy.TERMINATE_OTHER}
)
# Policies that stop the job's runs ahead of a new one.
PREEMPTING = frozenset({OverlapPolicy.CANCEL_OTHER, OverlapPolicy.TERMINATE_OTHER})


class Verdict(str, enum.Enum):
    RUN = "run"  # recorded pending and sent now
    BUFFER = "buffer"  # recorded buffered: sent when the runs ahead have ended
    SKIP = "skip"  # recorded skipped


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str = ""  # why it was skipped or buffered, in the ledger's words
    why_not_run: str = ""  # the metric's reason for a skipped slot: overlap, buffer_full
    stop_others: bool = False  # the job's runs ahead of it are to be stopped (preempted)


GO = Decision(Verdict.RUN)


def decide(
    policy: OverlapPolicy | str,
    *,
    running: int,
    waiting: int,
    buffered: int = 0,
    max_buffered: int = 1000,
) -> Decision:
    """What the job's policy does with one more run, given the runs ahead of it."""
    policy = OverlapPolicy(policy)
    ahead = running + waiting + buffered
    if policy is OverlapPolicy.ALLOW or ahead == 0:
        return GO
    name = policy.value
    if policy is OverlapPolicy.SKIP:
        reason = f"overlap policy '{name}': the previous run is still waiting or running"
        return Decision(Verdict.SKIP, reason, "overlap")
    if policy is OverlapPolicy.BUFFER_ONE:
        if waiting + buffered > 0:
            reason = f"overlap policy '{name}': a run is already waiting"
            return Decision(Verdict.SKIP, reason, "overlap")
        return GO
    if policy is OverlapPolicy.BUFFER_ALL:
        if buffered >= max_buffered:
            reason = f"overlap policy '{name}': buffer full ({max_buffered} runs waiting)"
            return Decision(Verdict.SKIP, reason, "buffer_full")
        return Decision(Verdict.BUFFER, f"overlap policy '{name}': waits its turn")
    # cancel_other, terminate_other: the newest slot waits for the runs ahead to stop.
    stop = "cancelled" if policy is OverlapPolicy.CANCEL_OTHER else "terminated"
    reason = f"overlap policy '{name}': waits for the run ahead to be {stop}"
    return Decision(Verdict.BUFFER, reason, stop_others=True)


def superseded(policy: OverlapPolicy | str, slot_text: str) -> str:
    """Why a buffered run of a preempting policy was skipped: a newer slot took its place."""
    name = OverlapPolicy(policy).value
    return f"overlap policy '{name}': superseded by the newer slot {slot_text}"
