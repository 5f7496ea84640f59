"""The chaos run's check of pieces (tests/chaos/pieces.py) passes a clean run and catches each
kind of violation it is there for."""

from __future__ import annotations

from tests.chaos.pieces import piece_violations

RUN = {"id": 7, "task_id": "cron-1-20261130T000000Z", "status": "success", "piece_count": 2}
PIECES = [
    {"run_id": 7, "index": 0, "status": "success", "attempt": 1},
    {"run_id": 7, "index": 1, "status": "success", "attempt": 2},
    {"run_id": 7, "index": -1, "status": "success", "attempt": 1},
]


def ran(*parts: tuple[str, int]) -> list[dict[str, object]]:
    return [{"task_id": f"{RUN['task_id']}.{part}", "attempt": n} for part, n in parts]


def test_a_clean_run_passes_and_is_counted():
    found, numbers = piece_violations([RUN], PIECES, ran(("0", 1), ("1", 1), ("1", 2), ("done", 1)))
    assert found == []
    assert numbers["pieces executed (incl. retries)"] == 3
    assert numbers["completions"] == 1


def test_a_piece_twice_at_one_attempt_is_caught():
    found, numbers = piece_violations([RUN], PIECES, ran(("0", 1), ("0", 1), ("1", 2), ("done", 1)))
    assert found == ["run 7: piece 0 attempt 1 ran 2x"]
    assert numbers["piece executions twice"] == 1


def test_an_attempt_the_ledger_does_not_declare_is_caught():
    found, _ = piece_violations([RUN], PIECES, ran(("0", 2), ("1", 1), ("done", 1)))
    assert found == ["run 7 piece 0 ran attempts [2]; the ledger declares 1"]


def test_a_completion_twice_or_never_is_caught():
    twice, _ = piece_violations([RUN], PIECES, ran(("0", 1), ("1", 1), ("done", 1), ("done", 1)))
    assert twice == ["run 7: its completion attempt 1 ran 2x"]
    never, _ = piece_violations([RUN], PIECES, ran(("0", 1), ("1", 1)))
    assert never == ["run 7 (success): its completion never ran"]


def test_a_run_left_running_or_with_open_pieces_is_caught():
    running = {**RUN, "status": "running"}
    found, _ = piece_violations([running], PIECES, ran(("0", 1)))
    assert found == ["run 7 split into pieces is left running"]
    open_piece = [*PIECES[:1], {**PIECES[1], "status": "queued"}, PIECES[2]]
    found, _ = piece_violations([RUN], open_piece, ran(("0", 1), ("done", 1)))
    assert found == ["run 7 is success with 1 pieces open"]
