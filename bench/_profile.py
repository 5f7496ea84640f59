"""One pool process's Python through a burst, function by function (py-spy, when installed).

:class:`PoolProfile` waits for an instant (the slot, or the drain's start), then samples the
busiest of the worker's pool processes with ``py-spy record --gil`` for a few seconds: only
samples taken while the process holds the GIL count, so the shares follow the process's CPU time
in Python, not its waits. :meth:`PoolProfile.lines` gives the functions with the largest
inclusive share (what they and their callees took), below the frames every sample shares, and
the largest self shares. py-spy is not a dependency: without it (or without the right to attach
to a process), the profile says why and the burst runs as without it.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _cpu import PROC, stat


def _children(pid: int) -> dict[int, float]:
    """The child processes of ``pid``, each with the CPU seconds it has used."""
    found = {}
    for entry in os.scandir(PROC):
        read = stat(int(entry.name)) if entry.name.isdigit() else None
        if read is not None and read[0] == pid:
            found[int(entry.name)] = read[1]
    return found


def _busiest_child(pid: int, over: float = 0.5) -> int | None:
    before = _children(pid)
    time.sleep(over)
    after = _children(pid)
    used = {child: ticks - before.get(child, 0) for child, ticks in after.items()}
    return max(used, key=lambda child: used[child]) if used else None


def _function(frame: str) -> str:
    """``func (path/file.py:123)`` -> ``func (file.py)``: lines of one function together."""
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.rsplit(':', 1)[0]).name})"


class PoolProfile:
    """Samples one pool process of a worker from an instant on (see the module)."""

    def __init__(self, seconds: float = 5.0, rate: int = 400) -> None:
        self.seconds = seconds
        self.rate = rate
        beside = Path(sys.executable).with_name("py-spy")  # installed in this virtualenv
        self.spy = shutil.which("py-spy") or (str(beside) if beside.exists() else "")
        self.problem = "" if self.spy else "py-spy is not installed"
        self._out = Path(tempfile.mkdtemp(prefix="dcc-profile-")) / "raw.txt"
        self._thread: threading.Thread | None = None

    def start(self, worker_pid: int, at: float) -> None:
        if self.problem:
            return
        self._thread = threading.Thread(target=self._record, args=(worker_pid, at), daemon=True)
        self._thread.start()

    def _record(self, worker_pid: int, at: float) -> None:
        time.sleep(max(0.0, at - time.time()))
        child = _busiest_child(worker_pid)
        if child is None:
            self.problem = "the worker has no pool process"
            return
        command = [self.spy, "record", "--gil", "-f", "raw"]
        command += ["-r", str(self.rate), "-d", str(int(self.seconds)), "-o", str(self._out)]
        done = subprocess.run(
            [*command, "-p", str(child)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            self.problem = f"py-spy failed: {done.stderr.strip().splitlines()[-1:]}"

    def lines(self, top: int = 14) -> list[str]:
        """The summary, or one line saying why there is none."""
        if self._thread is not None:
            self._thread.join()
        if self.problem or not self._out.exists():
            return [f"profile: none ({self.problem or 'py-spy wrote nothing'})"]
        total = 0
        inclusive: collections.Counter[str] = collections.Counter()
        own: collections.Counter[str] = collections.Counter()
        for line in self._out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            samples = int(count)
            frames = [_function(frame) for frame in stack.split(";")]
            total += samples
            own[frames[-1]] += samples
            for frame in set(frames):
                inclusive[frame] += samples
        if not total:
            return ["profile: no samples with the GIL held"]
        # Frames (nearly) every sample shares are the process's scaffolding: start below them.
        shown = [(f, n) for f, n in inclusive.most_common() if n < 0.9 * total][:top]
        out = [f"profile of one pool process, {total} samples with the GIL, inclusive:"]
        out += [f"  {100 * n / total:5.1f}% {frame}" for frame, n in shown]
        out.append("  self:")
        out += [f"  {100 * n / total:5.1f}% {frame}" for frame, n in own.most_common(top // 2)]
        return out
