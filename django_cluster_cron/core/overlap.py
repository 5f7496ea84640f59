"""Overlap policy on the dispatch side: may one more run of a job be sent while others are active?

Pure: the caller counts the job's active runs (``running``: started and not finished;
``waiting``: recorded or queued but not started, including runs waiting for a retry).
"""

from __future__ import annotations

import enum


class OverlapPolicy(str, enum.Enum):
    ALLOW = "allow"  # runs may overlap freely
    SKIP = "skip"  # a slot whose previous run is still waiting or running is skipped
    BUFFER_ONE = "buffer_one"  # at most one run waits behind the running one


def overlap_refusal(policy: OverlapPolicy | str, *, running: int, waiting: int) -> str | None:
    """``None`` if one more run may be dispatched, else the reason it is skipped."""
    policy = OverlapPolicy(policy)
    if policy is OverlapPolicy.SKIP and running + waiting > 0:
        return "overlap policy 'skip': the previous run is still waiting or running"
    if policy is OverlapPolicy.BUFFER_ONE and waiting > 0:
        return "overlap policy 'buffer_one': a run is already waiting"
    return None
