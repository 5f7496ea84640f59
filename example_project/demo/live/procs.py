"""Start, signal and stop the demo's processes; nothing started here outlives the demo.

Each child runs in a session of its own (so a Ctrl-C in the terminal reaches only the demo,
which then stops the children in order) and, on Linux, asks the kernel to SIGTERM it if the demo
process dies, so even a SIGKILLed demo leaves no orphans. Output goes to one log file per child.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLE_DIR = Path(__file__).resolve().parents[2]
ROOT = EXAMPLE_DIR.parent
STOP_TIMEOUT = 15.0  # seconds a process gets to stop on SIGTERM before SIGKILL


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


@dataclass
class Child:
    name: str
    command: list[str]
    log: Path
    proc: subprocess.Popen[bytes]
    started: float = field(default_factory=time.time)
    # Set when the demo itself ended it ("killed (SIGKILL)"), so an exit is not reported as a crash.
    ended_by_demo: str = ""
    reported: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def state(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "running"
        return self.ended_by_demo or f"exited ({code})"


class Supervisor:
    """The demo's children, by name, in start order."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self.children: dict[str, Child] = {}

    def start(self, name: str, command: Sequence[str]) -> Child:
        old = self.children.get(name)
        if old is not None and old.alive:
            raise RuntimeError(f"{name} is already running (pid {old.pid})")
        log = self.log_dir / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                list(command),
                cwd=EXAMPLE_DIR,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        child = Child(name=name, command=list(command), log=log, proc=proc)
        self.children.pop(name, None)  # re-insert: keep start order for stop_all
        self.children[name] = child
        return child

    def signal(self, name: str, signum: signal.Signals, why: str) -> Child:
        child = self.children[name]
        child.ended_by_demo = why
        with contextlib.suppress(ProcessLookupError):
            child.proc.send_signal(signum)
        return child

    def stop(self, name: str, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM the child (a Celery worker finishes its tasks), wait, then clear its group."""
        child = self.children[name]
        if child.alive:
            child.ended_by_demo = child.ended_by_demo or "stopped"
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
            try:
                child.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                child.ended_by_demo = f"killed after {timeout:g}s"
        # Whatever it left behind in its session (a Celery pool process, redis-server).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=5)

    def stop_all(self) -> None:
        # Reverse start order: schedulers and servers first, Redis last.
        for name in reversed(list(self.children)):
            self.stop(name)

    def died(self) -> list[Child]:
        """Children that exited on their own since the last call (each reported once)."""
        gone = [
            c
            for c in self.children.values()
            if not c.alive and not c.ended_by_demo and not c.reported
        ]
        for child in gone:
            child.reported = True
        return gone

    def pids(self) -> list[int]:
        return [c.pid for c in self.children.values()]


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
