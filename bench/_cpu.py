"""CPU time by process group through a burst, read from /proc (Linux): where a burst's work goes.

:class:`CpuMeter` samples, a few times a second, the user and system CPU time of the processes
it is told about and their children (the worker's main process and its pool processes, the
scheduler), of every PostgreSQL server process (backends, WAL writer, checkpointer: the server
may be shared, so the bench should be alone on it) and of the bench's own Redis server. A
PostgreSQL backend can live for a few milliseconds (a task that opens and closes its own
connection, as Django's default ``CONN_MAX_AGE = 0`` has it), too short to be sampled: the
server's own process (the postmaster) is credited with what its ended children used (the
kernel's ``cutime``/``cstime``), and a backend stops counting on its own once it has ended. After
the burst, :meth:`CpuMeter.between` gives each group's CPU seconds between two instants (the
samples nearest to them). On a machine with fewer cores than busy processes, a burst's wall time
follows the sum of these, not any one of them: the figures say which process pays for what.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from pathlib import Path

PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
GROUPS = ("worker main", "worker children", "scheduler", "postgres", "redis")


def stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, CPU seconds used, CPU seconds its ended children used) of a live process,
    or None."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    used = (int(fields[11]) + int(fields[12])) / TICK
    return int(fields[1]), used, (int(fields[13]) + int(fields[14])) / TICK


def _command(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class CpuMeter:
    """Samples CPU seconds by group while running (see the module); a no-op without /proc."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.worker: int | None = None
        self.scheduler: int | None = None
        self.redis_port: int | None = None
        self._samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._kinds: dict[int, str | None] = {}  # pid -> group (None: not measured)
        self._used: dict[int, tuple[str, float]] = {}  # pid -> (group, CPU seconds last seen)

    def _group(self, pid: int, parent: int) -> str | None:
        if pid in (self.worker, self.scheduler):
            return "worker main" if pid == self.worker else "scheduler"
        if parent == self.worker:
            return "worker children"
        if parent == self.scheduler:
            return "scheduler"
        if pid not in self._kinds:
            command = _command(pid)
            if command.startswith("postgres"):
                self._kinds[pid] = "postgres"
            elif "redis-server" in command and f":{self.redis_port}" in command:
                self._kinds[pid] = "redis"
            else:
                self._kinds[pid] = None
        return self._kinds[pid]

    def sample(self) -> None:
        """One reading. A process that ended keeps the CPU time it was last seen with, so a
        group's total never goes back; except a PostgreSQL process, whose time from then on is
        in its postmaster's count of ended children."""
        seen: dict[int, tuple[int, float, float]] = {}
        for entry in os.scandir(PROC):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            found = stat(pid)
            if found is None:
                continue
            seen[pid] = found
            group = self._group(pid, found[0])
            if group is not None:
                self._used[pid] = (group, found[1])
        server = {pid for pid, (group, _) in self._used.items() if group == "postgres"}
        for pid in server - seen.keys():  # ended: counted by its postmaster now
            del self._used[pid]
        # The postmaster (the parent of the server's other processes, whatever its command line)
        # forks a backend for each new connection and counts what its ended children used.
        alive = server & seen.keys()
        parents = {seen[pid][0] for pid in alive}
        postmasters = {pid for pid in parents if pid in seen and seen[pid][0] not in alive}
        totals = dict.fromkeys(GROUPS, 0.0)
        for pid in postmasters:  # its own time too, unless its command line counted it already
            totals["postgres"] += seen[pid][2] + (0.0 if pid in alive else seen[pid][1])
        for group, used in self._used.values():
            totals[group] += used
        self._samples.append((time.time(), totals))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> CpuMeter:
        if PROC.is_dir():
            self.sample()
            self._thread = threading.Thread(target=self._loop, name="cpu-meter", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.sample()

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds each group used between the samples nearest to ``start`` and ``end``
        (wall-clock times); empty when no two samples fall in between."""
        if len(self._samples) < 2:
            return {}
        times = [t for t, _ in self._samples]

        def nearest(moment: float) -> int:
            i = min(bisect.bisect_left(times, moment), len(times) - 1)
            if i > 0 and moment - times[i - 1] < times[i] - moment:
                i -= 1
            return i

        first, last = nearest(start), nearest(end)
        if first == last:  # shorter than the sampling interval: nothing to tell
            return {}
        before, after = self._samples[first][1], self._samples[last][1]
        return {group: round(after[group] - before[group], 2) for group in GROUPS}
