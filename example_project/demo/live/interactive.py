"""The live screen with keys: refreshed twice a second, on the terminal's alternate screen."""

from __future__ import annotations

import signal

from rich.console import Console, RenderableType
from rich.live import Live

from . import keys
from .app import Demo
from .snapshot import RECENT_RUNS, Snapshot
from .view import COMPACT_HEIGHT, COMPACT_WIDTH, render

REFRESH = 0.5  # seconds between snapshots; a key is handled as soon as it is pressed


def run(demo: Demo, console: Console) -> None:
    with keys.cbreak(), Live(console=console, screen=True, auto_refresh=False) as live:
        while True:
            snap = demo.observe()
            live.update(fit(console, demo, snap), refresh=True)
            key = keys.read_key(REFRESH)
            if key is None:
                continue
            key = key.lower()
            if key == "q":
                demo.notice = "stopping everything the demo started…"
                live.update(fit(console, demo, snap), refresh=True)
                return
            if key == "k":
                demo.notice = demo.stop_leader(snap, signal.SIGKILL)
            elif key == "t":
                demo.notice = demo.stop_leader(snap, signal.SIGTERM)
            elif key == "r":
                demo.notice = demo.toggle_redis()
            else:
                demo.notice = f"key {key!r} does nothing: use k, t, r or q"


def fit(console: Console, demo: Demo, snap: Snapshot) -> RenderableType:
    """The screen with as many runs and story lines as the terminal's height allows."""
    scene = demo.scene()
    compact = console.width < COMPACT_WIDTH or console.height < COMPACT_HEIGHT
    run_rows, event_lines = RECENT_RUNS, 8
    while True:
        view = render(snap, scene, demo.narrator.events, event_lines, run_rows, compact)
        # One line short of the height: rich's full-screen Live crops the last line otherwise.
        over = len(console.render_lines(view, console.options, pad=False)) - (console.height - 1)
        if over <= 0:
            return view
        # Give up story lines and runs in turns: keep at least 6 runs and 4 story lines while
        # possible, then shrink both to their minimum.
        if run_rows > 6:
            run_rows = max(6, run_rows - over)
        elif event_lines > 4:
            event_lines -= 1
        elif run_rows > 3:
            run_rows -= 1
        elif event_lines > 2:
            event_lines -= 1
        else:  # a tiny terminal: show the top of the screen
            return view
