"""The one benchmark command: run every workload, print the tables, write the Markdown report.

    .venv/bin/python bench/run.py [--quick] [--only idle_tick burst ...] [--sizes ...] [--reps R]
    .venv/bin/python bench/run.py --collect DIR     # re-render a report from a run's JSON files

Each workload is a separate process (``bench/<name>.py ... --json PATH``); one that is missing or
fails is reported as such and the others still run. Database: ``BENCH_DATABASE_URL`` or
``DATABASE_URL``; otherwise a full run creates (and afterwards drops) a dedicated database on the
PostgreSQL at 127.0.0.1:5432 if one answers, and a quick run uses SQLite. Writes
``bench/results/<date>-<full|quick>.md`` (and ``latest.md`` for full runs) plus the JSON of each
workload under ``bench/results/json-<full|quick>/``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from _report import environment, render

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
WORKLOADS = [
    "idle_tick",
    "burst",
    "latency",
    "change",
    "failover",
    "memory",
    "run_overhead",
    "cron_speed",
    "ops_scrape",
    "run_rows",
    "end_to_end",
    "partitions",
    "on_django_tasks",
]
WORKLOAD_TIMEOUT = 3 * 3600  # a stuck workload must not hang the whole run


def pick_database(quick: bool) -> tuple[str | None, str | None]:
    """(DATABASE_URL to use or None for SQLite, the name of a database we created to drop)."""
    given = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if given or quick:
        return given, None
    try:
        import psycopg

        name = f"dcc_bench_{os.getpid()}"
        with psycopg.connect(
            "postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True, connect_timeout=3
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgres://postgres@127.0.0.1:5432/{name}", name
    except Exception as exc:
        print(f"run.py: no PostgreSQL on 127.0.0.1:5432 ({exc}); using SQLite", file=sys.stderr)
        return None, None


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(
        "postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True, connect_timeout=3
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_workload(name: str, args: argparse.Namespace, out: Path, env: dict[str, str]) -> dict:
    script = BENCH / f"{name}.py"
    if not script.exists():
        return {"workload": name, "error": f"bench/{name}.py is missing"}
    command = [sys.executable, str(script), "--json", str(out / f"{name}.json")]
    if args.quick:
        command.append("--quick")
    if args.sizes:
        command += ["--sizes", *map(str, args.sizes)]
    if args.reps:
        command += ["--reps", str(args.reps)]
    print(f"\n$ {shlex.join(command)}", flush=True)
    started = time.monotonic()
    try:
        done = subprocess.run(command, env=env, cwd=BENCH.parent, timeout=WORKLOAD_TIMEOUT)
        code: int | str = done.returncode
    except subprocess.TimeoutExpired:
        code = f"timed out after {WORKLOAD_TIMEOUT} s"
    seconds = time.monotonic() - started
    print(f"run.py: {name} took {seconds:.0f} s", flush=True)
    path = out / f"{name}.json"
    if code != 0 or not path.exists():
        return {"workload": name, "error": f"exited with {code} after {seconds:.0f} s"}
    data = json.loads(path.read_text())
    data["seconds"] = seconds
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (CI): small N, 1 rep")
    parser.add_argument("--only", nargs="+", choices=WORKLOADS, help="run only these workloads")
    parser.add_argument("--sizes", type=int, nargs="+", help="numbers of jobs for every workload")
    parser.add_argument("--reps", type=int, help="repetitions for every workload")
    parser.add_argument("--collect", type=Path, help="render the report from this JSON directory")
    args = parser.parse_args()
    mode = "quick" if args.quick else "full"
    command = shlex.join(["bench/run.py", *sys.argv[1:]])

    database, created = None, None
    results = []
    if args.collect:
        out = args.collect
        for name in args.only or WORKLOADS:
            path = out / f"{name}.json"
            results.append(
                json.loads(path.read_text())
                if path.exists()
                else {"workload": name, "error": f"no {path.name} in {out}"}
            )
        database = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL")
    else:
        out = RESULTS / f"json-{mode}"
        out.mkdir(parents=True, exist_ok=True)
        database, created = pick_database(args.quick)
        env = dict(os.environ)
        env.pop("DATABASE_URL", None)
        if database:
            env["DATABASE_URL"] = database
        try:
            for name in args.only or WORKLOADS:
                results.append(run_workload(name, args, out, env))
        finally:
            if created:
                drop_database(created)

    info = environment(database)
    markdown = render(results, info, command, mode)
    RESULTS.mkdir(exist_ok=True)
    target = RESULTS / f"{datetime.date.today().isoformat()}-{mode}.md"
    target.write_text(markdown)
    if mode == "full" and not args.only:
        (RESULTS / "latest.md").write_text(markdown)
    print(f"\nwrote {target.relative_to(BENCH.parent)}")
    failed = [r["workload"] for r in results if "error" in r]
    if failed:
        print(f"workloads that did not complete: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
