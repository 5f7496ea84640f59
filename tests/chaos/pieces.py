"""The chaos run's jobs with pieces, and what the witness must show of them.

Each piece's body writes a witness row with the piece's own task id (``<run's>.<index>``) and
attempt; each completion message one with ``<run's>.done``. From those rows and the ledger:

* no piece executed twice at one attempt, nor at an attempt its row does not declare;
* a run that closed had its completion task run, each attempt of it at most once (a second
  attempt only if the first one's worker died: the chaos run retries nothing by hand, so a run
  closes once, and a second close would be attempt 1 again, caught as run twice);
* no run split into pieces is left running, and no piece of a closed run left open.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

# (cron, max_parallel_pieces, seconds a piece works): a job of 8 pieces, all at once or 3 at a
# time, every few seconds, each with a completion task.
PIECE_PLANS = (
    ("* * * * * */4", None, 0.2),
    ("* * * * * */6", 3, 0.3),
)
PIECES = 8
OPEN = ("pending", "queued", "running", "retrying")


def piece_violations(
    runs: Iterable[Mapping[str, Any]],
    pieces: Iterable[Mapping[str, Any]],
    executions: Iterable[Mapping[str, Any]],
) -> tuple[list[str], dict[str, int]]:
    """What broke the rules above, and the numbers the report shows. ``runs``: the ledger's
    runs (id, task_id, status, piece_count); ``pieces``: their pieces (run_id, index, status,
    attempt); ``executions``: the witness rows (task_id, attempt)."""
    violations: list[str] = []
    split = {r["task_id"]: r for r in runs if r["piece_count"]}
    attempts: dict[tuple[int, int], int] = {}
    open_pieces: Counter[int] = Counter()
    for piece in pieces:
        attempts[(piece["run_id"], piece["index"])] = piece["attempt"]
        if piece["status"] in OPEN:
            open_pieces[piece["run_id"]] += 1
    ran: dict[tuple[str, str], Counter[int]] = defaultdict(Counter)
    for row in executions:
        base, _, part = str(row["task_id"]).rpartition(".")
        if base in split:
            ran[(base, part)][row["attempt"]] += 1
    twice = completions = 0
    for (base, part), counted in ran.items():
        run = split[base]
        for attempt, times in counted.items():
            if times > 1:
                twice += times - 1
                what = "its completion" if part == "done" else f"piece {part}"
                violations.append(f"run {run['id']}: {what} attempt {attempt} ran {times}x")
        if part == "done":
            completions += sum(counted.values())
        declared = attempts.get((run["id"], -1 if part == "done" else int(part)), 0)
        if max(counted) > declared:
            violations.append(
                f"run {run['id']} piece {part} ran attempts {sorted(counted)}; the ledger "
                f"declares {declared}"
            )
    for run in split.values():
        if run["status"] == "running":
            violations.append(f"run {run['id']} split into pieces is left running")
        elif open_pieces[run["id"]]:
            violations.append(
                f"run {run['id']} is {run['status']} with {open_pieces[run['id']]} pieces open"
            )
        closed = run["status"] in ("success", "failed", "cancelled")
        done = sum(ran.get((run["task_id"], "done"), Counter()).values())
        if closed and not done:
            violations.append(f"run {run['id']} ({run['status']}): its completion never ran")
    numbers = {
        "runs split into pieces": len(split),
        "pieces executed (incl. retries)": sum(
            sum(c.values()) for (_, part), c in ran.items() if part != "done"
        ),
        "piece executions twice": twice,
        "completions": completions,
    }
    return violations, numbers
