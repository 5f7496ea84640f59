"""The chaos run's epoch check, on the rows of a run it once got wrong and on rows that do break
the rule: a check that cannot fail proves nothing."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from tests.chaos.epochs import epoch_violations

HELD = "overlap policy 'buffer_all': waits its turn"


def at(seconds: float) -> datetime:
    return datetime(2026, 11, 30, 0, 36, tzinfo=timezone.utc).replace(
        second=int(seconds), microsecond=int(seconds % 1 * 1e6)
    )


def run(
    pk: int, epoch: int, node: str, created: float, queued: float | None, reason: str = ""
) -> dict[str, Any]:
    return {
        "id": pk,
        "epoch": epoch,
        "dispatched_by": node,
        "created_at": at(created),
        "queued_at": None if queued is None else at(queued),
        "reason": reason,
    }


def test_a_held_run_a_later_leader_released_and_sent_fits_when_it_was_sent() -> None:
    # Recorded under epoch 2 at :38, held, released and first sent by epoch 3's leader at :51
    # (its send restamped the epoch); epoch 2 wrote last at :48.
    runs = [
        run(1, 2, "a", 30, 30.1),
        run(404, 2, "a", 48, None, "overlap policy 'skip': the previous run is still running"),
        run(147, 3, "b", 38, 51, HELD),
        run(2, 3, "b", 52, 52.1),
    ]
    assert epoch_violations(runs) == []


def test_a_held_run_a_worker_released_keeps_its_recorder_and_fits_when_it_was_recorded() -> None:
    runs = [run(1, 2, "a", 30, 30.1), run(5, 2, "a", 38, 55, HELD), run(2, 3, "b", 50, 50.1)]
    assert epoch_violations(runs) == []


def test_a_held_run_that_fits_its_epoch_at_neither_time_is_reported() -> None:
    runs = [run(1, 2, "a", 30, 30.1), run(2, 3, "b", 40, 40.1), run(9, 2, "a", 45, 50, HELD)]
    (violation,) = epoch_violations(runs)
    assert violation.startswith("run 9 (held back by its policy) fits its epoch 2 neither")


def test_interleaved_epochs_and_a_shared_epoch_are_reported() -> None:
    runs = [run(1, 2, "a", 30, 31), run(2, 3, "b", 32, 32.5), run(3, 2, "a", 33, 34)]
    assert [v.split(":")[0] for v in epoch_violations(runs)] == [
        "epoch 2 wrote after epoch 3 had started"
    ]
    shared = [run(1, 2, "a", 30, 31), run(2, 2, "b", 32, 33)]
    assert epoch_violations(shared) == ["epoch 2 used by several nodes: ['a', 'b']"]
