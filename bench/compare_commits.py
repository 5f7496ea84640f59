"""Two commits of ours, side by side: the same workloads, interleaved on one machine.

    .venv/bin/python bench/compare_commits.py BEFORE AFTER [--rounds 3] [--only burst latency]

Each commit is checked out into a git worktree of its own (in a temp directory) and each
workload runs as that worktree's own script (``<worktree>/bench/<workload>.py``) with the
worktree first on the path, so each commit is measured with the code and the benchmark it
shipped. Rounds alternate the order (before, after; then after, before; ...) so that a machine
that slows down or warms up during the run does not favour one side. Only our scheduler is
measured (no peers). The database is a PostgreSQL database created for the run on
127.0.0.1:5432 and dropped afterwards (or ``BENCH_DATABASE_URL``); Redis is each workload's own
throwaway server.

The workloads and what is compared (the medians over rounds, with min-max):

* ``burst`` — 10,000 jobs owing one slot: time until all are in the broker, and our rate over
  the bare kombu publishes measured in the same repetition;
* ``latency`` — 10,000 jobs due at one instant (``latency.py --minutes 1``): p50 and p99 of
  arrival in the broker minus the fire time;
* ``idle_tick`` — an idle tick at 100 and 100,000 jobs: its time and its SQL queries;
* ``run_overhead`` — a run through ``execute_run`` minus the bare task, per database.

Prints one table; ``--json PATH`` writes every sample.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# workload -> (arguments, {label: how to read it from the workload's JSON rows})
Reader = Callable[[list[dict[str, Any]]], float | None]


def _row(system: str, metric: str, n: int | None = None, variant: str | None = None) -> Reader:
    def read(rows: list[dict[str, Any]]) -> float | None:
        for row in rows:
            if (
                row["system"] == system
                and row["metric"] == metric
                and (n is None or row["n"] == n)
                and (variant is None or row["variant"] == variant)
            ):
                return float(row["median"])
        return None

    return read


def _rate_ratio(rows: list[dict[str, Any]]) -> float | None:
    ours = _row("ours", "rate", 10_000)(rows)
    bare = _row("kombu (bare publish)", "rate", 10_000)(rows)
    return None if ours is None or not bare else ours / bare


WORKLOADS: dict[str, tuple[list[str], dict[str, Reader]]] = {
    "burst": (
        ["--sizes", "10000", "--reps", "1", "--ours-only"],
        {
            "burst 10,000: time to all in the broker (s)": _row(
                "ours", "time to all N in broker", 10_000
            ),
            "burst 10,000: our rate / bare publish rate": _rate_ratio,
        },
    ),
    "latency": (
        ["--sizes", "10000", "--minutes", "1", "--seconds-n", "0", "--systems", "ours"],
        {
            "10,000 at one instant: p50 (s)": _row("ours", "p50 latency", 10_000),
            "10,000 at one instant: p99 (s)": _row("ours", "p99 latency, all N pooled", 10_000),
        },
    ),
    "idle_tick": (
        ["--sizes", "100", "100000", "--reps", "50", "--ours-only"],
        {
            "idle tick at 100 jobs (ms)": _row("ours", "idle tick time", 100),
            "idle tick at 100,000 jobs (ms)": _row("ours", "idle tick time", 100_000),
            "idle tick at 100,000 jobs (SQL queries)": _row(
                "ours", "SQL queries per idle tick", 100_000
            ),
        },
    ),
    "run_overhead": (
        ["--runs", "500", "--reps", "3"],
        {
            "worker overhead per run, SQLite (ms)": _row(
                "ours", "overhead per run (ours - bare)", variant="SQLite"
            ),
            "worker overhead per run, PostgreSQL (ms)": _row(
                "ours", "overhead per run (ours - bare)", variant="PostgreSQL"
            ),
        },
    ),
}


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_database() -> tuple[str, Callable[[], None]]:
    given = os.environ.get("BENCH_DATABASE_URL")
    if given:
        return given, lambda: None
    import psycopg

    name = f"dcc_compare_{os.getpid()}"
    admin = "postgresql://postgres@127.0.0.1:5432/postgres"
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return f"postgres://postgres@127.0.0.1:5432/{name}", drop


def run_workload(tree: Path, name: str, database: str) -> list[dict[str, Any]]:
    args, _readers = WORKLOADS[name]
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = dict(os.environ, DATABASE_URL=database, PYTHONPATH=str(tree))
        env.pop("REDIS_URL", None)
        command = [sys.executable, str(tree / "bench" / f"{name}.py"), *args, "--json", out.name]
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise RuntimeError(f"{name} at {tree.name} failed ({done.returncode}):\n{tail}")
        rows: list[dict[str, Any]] = json.loads(Path(out.name).read_text())["rows"]
        return rows


def summary(values: list[float]) -> str:
    if not values:
        return "—"
    middle = statistics.median(values)
    return f"{middle:.4g} ({min(values):.4g}-{max(values):.4g})"


def main() -> None:
    cli = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    cli.add_argument("before")
    cli.add_argument("after")
    cli.add_argument("--rounds", type=int, default=3)
    cli.add_argument("--only", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    cli.add_argument("--json", type=Path, help="write every sample here")
    args = cli.parse_args()
    commits = {"before": git("rev-parse", args.before), "after": git("rev-parse", args.after)}
    scratch = Path(tempfile.mkdtemp(prefix="dcc-compare-"))
    trees: dict[str, Path] = {}
    for side, sha in commits.items():
        trees[side] = scratch / f"{side}-{sha[:8]}"
        git("worktree", "add", "--detach", str(trees[side]), sha)
    database, drop = make_database()
    samples: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    try:
        for round_number in range(args.rounds):
            order = ["before", "after"] if round_number % 2 == 0 else ["after", "before"]
            for name in args.only:
                for side in order:
                    print(f"round {round_number + 1}: {name} at {side} {commits[side][:8]}")
                    rows = run_workload(trees[side], name, database)
                    for label, read in WORKLOADS[name][1].items():
                        value = read(rows)
                        if value is not None:
                            samples[side].setdefault(label, []).append(value)
    finally:
        drop()
        for tree in trees.values():
            git("worktree", "remove", "--force", str(tree))
    before, after = commits["before"][:8], commits["after"][:8]
    print(f"\n{args.rounds} rounds, interleaved; median (min-max) over rounds")
    print(f"{'':<44} {'before ' + before:>26} {'after ' + after:>26} {'after/before':>12}")
    for name in args.only:
        for label in WORKLOADS[name][1]:
            old, new = samples["before"].get(label, []), samples["after"].get(label, [])
            ratio = (
                f"{statistics.median(new) / statistics.median(old):.3f}"
                if old and new and statistics.median(old)
                else "—"
            )
            print(f"{label:<44} {summary(old):>26} {summary(new):>26} {ratio:>12}")
    if args.json:
        args.json.write_text(json.dumps({"commits": commits, "samples": samples}, indent=2))


if __name__ == "__main__":
    main()
