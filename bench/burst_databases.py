"""Burst on each database: N slots due at once, ours on PostgreSQL and on MySQL/MariaDB.

    .venv/bin/python bench/burst_databases.py [--sizes 10000] [--reps 3]
        [--databases postgres://postgres@127.0.0.1:5432/test mysql://root@127.0.0.1:3306/test]

Runs ``bench/burst.py --ours-only`` once per repetition and database, alternating the databases
so both see the same machine state; each run has its own throwaway Redis broker and times ours
and N bare kombu publishes. Prints the medians and the ratio of each database to the first.
The databases given are filled and emptied (use scratch databases).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DATABASES = ["postgres://postgres@127.0.0.1:5432/test", "mysql://root@127.0.0.1:3306/test"]


def one_run(url: str, n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "burst.json"
        env = dict(os.environ, DATABASE_URL=url)
        command = [sys.executable, str(HERE / "burst.py"), "--ours-only", "--sizes", str(n)]
        command += ["--reps", "1", "--json", str(out)]
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        rows = json.loads(out.read_text())["rows"]
    found = {}
    for row in rows:
        if row["metric"] == "time to all N in broker":
            found[row["system"]] = row["median"]
    return found


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--sizes", type=int, nargs="*", default=[10_000])
    cli.add_argument("--reps", type=int, default=3)
    cli.add_argument("--databases", nargs="*", default=DEFAULT_DATABASES)
    args = cli.parse_args()
    for n in args.sizes:
        ours: dict[str, list[float]] = {url: [] for url in args.databases}
        kombu: dict[str, list[float]] = {url: [] for url in args.databases}
        for _ in range(args.reps):
            for url in args.databases:
                found = one_run(url, n)
                ours[url].append(found["ours"])
                kombu[url].append(found["kombu (bare publish)"])
        print(f"\nN={n:,} slots due at once ({args.reps} reps, medians)")
        first = statistics.median(ours[args.databases[0]])
        for url in args.databases:
            mine = statistics.median(ours[url])
            bare = statistics.median(kombu[url])
            print(
                f"  {url.split('://')[0]:<10} ours {mine:7.3f} s = {n / mine:7,.0f} runs/s"
                f"  (bare kombu {bare:.3f} s; ours at {bare / mine:.0%} of it)"
                f"  ratio to {args.databases[0].split('://')[0]}: {mine / first:.2f}x"
            )


if __name__ == "__main__":
    main()
