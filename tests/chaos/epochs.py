"""The chaos run's epoch check: one holder per epoch, and epochs never interleave.

A run's ``epoch`` and ``dispatched_by`` are written by a fenced leader write: when it is
recorded, and again by its first send if a leader sent it (it may have been recorded ahead by the
leader before). So a run's write time is when it was sent (``queued_at``), or when it was
recorded if it never was.

A run its job's overlap policy held back is the one row the data alone does not place: released
and first sent by a leader, it names that leader as of ``queued_at``; released and sent by a
worker (no fence, nothing restamped), it still names the leader that recorded it, as of
``created_at``. Such a run must fit its epoch at one of the two times; the epochs' bounds come
from the other rows only.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from datetime import datetime
from typing import Any


def _held(run: dict[str, Any]) -> bool:
    return run["reason"].startswith("overlap policy") and "waits" in run["reason"]


def epoch_violations(runs: list[dict[str, Any]]) -> list[str]:
    """What breaks the rule in ``runs`` (rows with ``epoch``, ``dispatched_by``, ``reason``,
    ``queued_at``, ``created_at``), each as a sentence naming the rows."""
    found: list[str] = []
    holders: dict[int, set[str]] = defaultdict(set)
    placed: dict[int, list[tuple[datetime, dict[str, Any]]]] = defaultdict(list)
    held: list[dict[str, Any]] = []
    for run in runs:
        if run["epoch"] is None:
            continue
        holders[run["epoch"]].add(run["dispatched_by"])
        if _held(run):
            held.append(run)
        else:
            placed[run["epoch"]].append((run["queued_at"] or run["created_at"], run))
    for epoch, nodes in holders.items():
        if len(nodes) > 1:
            found.append(f"epoch {epoch} used by several nodes: {sorted(nodes)}")

    ordered = sorted(placed)
    first = {e: min(placed[e], key=lambda span: span[0]) for e in ordered}
    last = {e: max(placed[e], key=lambda span: span[0]) for e in ordered}
    for older, newer in itertools.pairwise(ordered):
        if last[older][0] > first[newer][0]:
            # Both rows, whole: which write, by whom, and what it was.
            found.append(
                f"epoch {older} wrote after epoch {newer} had started: "
                f"last of {older} {last[older][1]}; first of {newer} {first[newer][1]}"
            )

    for run in held:
        epoch = run["epoch"]
        after = [last[e][0] for e in ordered if e < epoch]
        before = [first[e][0] for e in ordered if e > epoch]
        times = [t for t in (run["created_at"], run["queued_at"]) if t is not None]
        if not any(
            all(t >= bound for bound in after) and all(t <= bound for bound in before)
            for t in times
        ):
            found.append(
                f"run {run['id']} (held back by its policy) fits its epoch {epoch} neither when "
                f"it was recorded nor when it was sent: {run}"
            )
    return found
