"""Record a real failover for the docs' timeline, then redraw the figures.

    .venv/bin/python scripts/docs_failover.py [--ttl 4] [--poll 0.5]

Starts a throwaway Redis and a fresh SQLite database (never a shared server), two
`run_scheduler` processes with a short lease TTL and an every-second job, waits until node `a`
leads and `b` stands by, SIGKILLs `a`, and lets `b` take over and catch up. The events come from
the processes' own log lines (`lease.acquired`, `lease.released`) and from the JobRun rows
(slot, insert time, node, trigger); they are written, relative to the kill, to
docs/assets/failover-run.json, and scripts/docs_figures.py draws them.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOG_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \w+ \S+ \[\d+\] (lease\.\w+) node=(\S+) epoch=(\d+)"
)


def boot() -> dict[str, str]:
    """bench/_env.py's set-up, always on a new SQLite file (boot() empties the tables)."""
    tmp = Path(tempfile.mkdtemp(prefix="dcc-docs-failover-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'failover.sqlite3'}"
    spec = importlib.util.spec_from_file_location("bench_env", ROOT / "bench" / "_env.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    env: dict[str, str] = module.boot()
    return env


def lease_events(log: str, kill: float) -> list[dict[str, Any]]:
    events = []
    for line in log.splitlines():
        match = LOG_LINE.match(line)
        if match:
            stamp, millis, kind, node, epoch = match.groups()
            wall = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
            events.append(
                {"kind": kind, "node": node, "epoch": int(epoch), "at": round(wall - kill, 3)}
            )
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ttl", type=float, default=4.0)
    parser.add_argument("--poll", type=float, default=0.5)
    args = parser.parse_args()
    env = boot()
    from datetime import timedelta

    from django_cluster_cron.models import JobDefinition, JobRun

    job = JobDefinition(
        name="every-second",
        cron="* * * * * *",
        timezone="UTC",
        task="tests.add",
        args=[1, 2],
        catchup_policy="all",
        catchup_window=timedelta(minutes=5),
    )
    job.full_clean()
    job.save()
    logs = Path(tempfile.mkdtemp(prefix="dcc-docs-logs-"))
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(node: str) -> None:
        command = [
            sys.executable,
            "-m",
            "django",
            "run_scheduler",
            "--node-id",
            node,
            "--lease-ttl",
            str(args.ttl),
            "--poll-interval",
            str(args.poll),
        ]
        log = open(logs / f"{node}.log", "wb")  # noqa: SIM115 (lives as long as the process)
        procs[node] = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)

    def wait_for_run_by(node: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not JobRun.objects.filter(dispatched_by=node).exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"{node} did not dispatch within {timeout:g} s; logs in {logs}")
            time.sleep(0.05)

    try:
        start("a")
        wait_for_run_by("a", 30)
        start("b")
        time.sleep(4)  # a leads for a while with b standing by
        kill = time.time()
        procs["a"].send_signal(signal.SIGKILL)
        wait_for_run_by("b", args.ttl * 3 + 10)
        time.sleep(4)
        procs["b"].send_signal(signal.SIGTERM)
        procs["b"].wait(20)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    events = []
    for node in ("a", "b"):
        events += lease_events((logs / f"{node}.log").read_text(), kill)
    for run in JobRun.objects.filter(job=job).exclude(dispatched_by="").order_by("scheduled_for"):
        events.append(
            {
                "kind": "run",
                "node": run.dispatched_by,
                "epoch": run.epoch,
                "trigger": run.trigger,
                "slot": round(run.scheduled_for.timestamp() - kill, 3),
                "at": round(run.created_at.timestamp() - kill, 3),
            }
        )
    shutil.rmtree(logs)  # kept only when a node failed to dispatch (see wait_for_run_by)
    write(events, args.ttl, args.poll)


def write(events: list[dict[str, Any]], ttl: float, poll: float) -> None:
    acquired = {e["node"]: e for e in events if e["kind"] == "lease.acquired"}
    released = {e["node"]: e for e in events if e["kind"] == "lease.released"}
    runs_b = [e for e in events if e["kind"] == "run" and e["node"] == "b"]
    first_b = min(e["at"] for e in runs_b)
    # Slots that fell while nobody led; within ON_TIME_GRACE their trigger is still "schedule".
    caught_up = sum(1 for e in runs_b if e["slot"] < acquired["b"]["at"])
    window = (-4.0, round(min(released["b"]["at"], acquired["b"]["at"] + 4.5) + 0.5))
    data = {
        "recorded": datetime.now().astimezone().isoformat(timespec="seconds"),
        "ttl": ttl,
        "poll": poll,
        "nodes": ["a", "b"],
        "window": window,
        "leases": [
            {"node": "a", "epoch": acquired["a"]["epoch"], "start": acquired["a"]["at"], "end": 0},
            {
                "node": "b",
                "epoch": acquired["b"]["epoch"],
                "start": acquired["b"]["at"],
                "end": released["b"]["at"],
            },
        ],
        "caption": (
            f"Recorded run, TTL {ttl:g} s, poll {poll:g} s: node b took the lease "
            f"{acquired['b']['at']:.2f} s after the SIGKILL, dispatched its first run at "
            f"{first_b:.2f} s and caught up {caught_up} slots of the gap"
        ),
        "events": events,
    }
    out = ROOT / "docs" / "assets" / "failover-run.json"
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(data["caption"])
    subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_figures.py")], check=True)


if __name__ == "__main__":
    main()
