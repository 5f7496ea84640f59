"""The terminal demo (`make demo`): its narration and screen, and its refusal to guess a Redis.

The scripted story end to end, as CI plays it: tests/cluster/test_demo.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from rich.console import Console

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "example_project"
if str(EXAMPLE) not in sys.path:  # the demo's code lives in the example project
    sys.path.insert(0, str(EXAMPLE))

from demo.live.narrator import Narrator  # noqa: E402
from demo.live.snapshot import NodeReport, RunRow, Snapshot, Takeover  # noqa: E402
from demo.live.view import Scene, render  # noqa: E402

T0 = datetime(2026, 1, 5, 12, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run_row(status: str, *, attempt: int = 1, this_demo: bool = True, note: str = "") -> RunRow:
    return RunRow(
        job="echo",
        slot=at(0),
        trigger="schedule",
        status=status,
        attempt=attempt,
        node="demo-a",
        epoch=4,
        worker="host:1",
        duration=timedelta(seconds=0.5),
        note=note,
        this_demo=this_demo,
    )


class FakeTakeovers:
    """Stands in for the database query: no dispatch under an epoch until one is set."""

    def __init__(self) -> None:
        self.found: dict[int, Takeover] = {}

    def __call__(self, epoch: int, acquired_at: datetime) -> Takeover | None:
        return self.found.get(epoch)


def texts(narrator: Narrator) -> list[str]:
    return [event.text for event in narrator.drain()]


def test_a_takeover_is_timed_from_the_action_and_its_first_dispatch_reported() -> None:
    takeovers = FakeTakeovers()
    narrator = Narrator(start_epoch=3, takeover=takeovers)
    narrator.action(at(0), "demo-a killed (SIGKILL)", "the SIGKILL of demo-a")
    narrator.observe(Snapshot(now=at(1), leader="demo-a", epoch=3, epoch_holder="demo-a"))
    assert texts(narrator) == ["demo-a killed (SIGKILL)"]

    snap = Snapshot(now=at(4), leader="demo-b", epoch=4, epoch_holder="demo-b", acquired_at=at(3.2))
    narrator.observe(snap)
    assert texts(narrator) == [
        "demo-b took the lease at epoch 4, 3.2 s after the SIGKILL of demo-a"
    ]
    assert narrator.leaderships[-1].after_action == pytest.approx(3.2)

    narrator.observe(snap)  # no dispatch yet: nothing more to say
    assert texts(narrator) == []
    takeovers.found[4] = Takeover(
        epoch=4, job="echo", slot=at(2), sent_at=at(3.7), late=2, missed=1
    )
    narrator.observe(snap)
    assert texts(narrator) == [
        "demo-b sent its first run 0.5 s after taking over; of the slots that fell due while "
        "nobody led, 2 were run late and 1 was recorded missed (catch-up policy)"
    ]
    narrator.observe(snap)
    assert texts(narrator) == []


def test_the_epoch_found_at_start_is_not_a_takeover() -> None:
    narrator = Narrator(start_epoch=7, takeover=FakeTakeovers())
    narrator.observe(Snapshot(now=at(0), leader="demo-a", epoch=7, epoch_holder="demo-a"))
    assert texts(narrator) == []
    assert narrator.leaderships == []


def test_a_redis_outage_is_told_once_each_way_and_is_not_a_node_dying() -> None:
    narrator = Narrator(start_epoch=4, takeover=FakeTakeovers())
    narrator.observe(Snapshot(now=at(0), leader="demo-a", epoch=4, epoch_holder="demo-a"))
    down = Snapshot(now=at(1), epoch=4, epoch_holder="demo-a", redis_error="ConnectionError: x")
    narrator.observe(down)
    narrator.observe(down)
    said = texts(narrator)
    assert len(said) == 1
    assert said[0].startswith("Redis unreachable")
    # Back, empty: nobody holds the lease yet, which is not "demo-a is gone".
    narrator.observe(Snapshot(now=at(6), epoch=4, epoch_holder="demo-a"))
    assert texts(narrator) == ["Redis answers again (down for about 5 s)"]


def test_runs_are_told_once_and_only_those_of_this_demo() -> None:
    narrator = Narrator(start_epoch=None, takeover=FakeTakeovers())
    old = run_row("failed", this_demo=False, note="from yesterday")
    failed = run_row("failed", attempt=3, note="RuntimeError: boom")
    retrying = run_row("retrying", attempt=2)
    for _ in range(2):
        narrator.observe(Snapshot(now=at(0), runs=[old, failed, retrying, run_row("success")]))
    assert texts(narrator) == [
        "'echo' failed for good at attempt 3: RuntimeError: boom",
        "'echo' attempt 1 failed; the same run is retried as attempt 2 after a backoff "
        "(a retry is never a second run)",
        "first run succeeded: 'echo' on host:1 in 0.5 s",
    ]


def screen_of_two_nodes(
    runs: list[RunRow], counts: dict[str, int]
) -> tuple[Snapshot, Scene, Narrator]:
    """demo-a leads (epoch 4), demo-b stands by, demo-c was killed; the narrator has seen it."""
    narrator = Narrator(start_epoch=None, takeover=FakeTakeovers())
    snap = Snapshot(
        now=at(10),
        leader="demo-a",
        lease_left=2.4,
        epoch=4,
        epoch_holder="demo-a",
        nodes={
            "demo-a": NodeReport("demo-a", "leader", 4, at(9.5), 11),
            "demo-b": NodeReport("demo-b", "standby", None, at(9.8), 12),
        },
        runs=runs,
        counts=counts,
    )
    narrator.observe(snap)
    scene = Scene(
        admin_url="http://127.0.0.1:8000/admin/",
        login="admin / admin",
        database="SQLite db.sqlite3",
        redis="redis://127.0.0.1:6390/0 (throwaway)",
        lease_ttl=3,
        log_dir="/tmp/logs",
        nodes=[("demo-a", 11, "running"), ("demo-b", 12, "running"), ("demo-c", 13, "killed")],
        services=[("celery-worker", "running (pid 10)")],
    )
    return snap, scene, narrator


def test_the_screen_shows_leader_login_jobs_runs_and_story() -> None:
    snap, scene, narrator = screen_of_two_nodes(
        [run_row("running"), run_row("success")], {"success": 3, "failed": 1}
    )
    console = Console(width=160, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render(snap, scene, narrator.events))
    screen = console.export_text()
    for expected in (
        "http://127.0.0.1:8000/admin/",
        "admin / admin",
        "TTL 3 s here",
        "★ leader",
        "2.4 s",
        "standby",
        "killed",
        "success 3",
        "failed 1",
        "first run succeeded",
    ):
        assert expected in screen, f"{expected!r} not on the screen:\n{screen}"


def test_an_80_by_24_terminal_gets_the_compact_screen_with_nothing_cut() -> None:
    from types import SimpleNamespace

    from demo.live.interactive import fit

    snap, scene, narrator = screen_of_two_nodes(
        [run_row("running"), run_row("failed", attempt=2)] + [run_row("success")] * 20,
        {"success": 20, "failed": 1, "running": 1},
    )
    demo = SimpleNamespace(scene=lambda: scene, narrator=narrator)
    console = Console(width=80, height=24, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    view = fit(console, demo, snap)  # type: ignore[arg-type]
    lines = console.render_lines(view, console.options, pad=False)
    assert len(lines) <= 23  # one short of the height: rich's full screen crops the last
    console.print(view)
    screen = console.export_text()
    assert all(len(line) <= 80 for line in screen.splitlines())
    for expected in (
        "http://127.0.0.1:8000/admin/",
        "admin / admin",
        "kill leader",
        "★ leader",
        "standby",
        "killed",
        "success 20",
        "failed",
        "demo-a @4",
        "0.50 s",
        "what happened",
    ):
        assert expected in screen, f"{expected!r} not on the screen:\n{screen}"
    assert "…" not in screen, screen  # no column squeezed to "no… pro…"
    assert screen.count(" success ") >= 6  # at least six runs shown


def test_demo_live_refuses_to_guess_a_redis() -> None:
    unset = ("REDIS_URL", "DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    result = subprocess.run(
        [sys.executable, "manage.py", "demo_live", "--script"],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "REDIS_URL is not set" in result.stderr
