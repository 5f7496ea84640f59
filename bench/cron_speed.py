"""Fire-time computation: ``fire_times`` against cronsim on the same expressions, in one run.

    .venv/bin/python bench/cron_speed.py [--results 10000] [--reps 7] [--quick] [--json PATH]

For each expression, the time to get the next --results fire times after 2026-01-01 in
Europe/Berlin: ours through the public ``django_cluster_cron.schedule.fire_times`` (parsing
included), cronsim (the independent implementation the test suite checks us against) by iterating
a ``CronSim`` from the same instant. Repetitions interleave the two; the table gives the median
and the ratio ours / cronsim (target, issue 13: within 2x). cronsim's seconds field comes first:
the all-``*`` expression reads the same in both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _procs import row, write_json

ZONE = "Europe/Berlin"
AFTER = datetime(2026, 1, 1, tzinfo=timezone.utc)
# (label, ours, cronsim's spelling)
EXPRESSIONS = [
    ("every second", "* * * * * *", "* * * * * *"),
    ("weekdays at 09:00", "0 9 * * 1-5", "0 9 * * 1-5"),
    ("every 15 minutes", "*/15 * * * *", "*/15 * * * *"),
    ("last Friday 02:30", "30 2 * * 5L", "30 2 * * 5L"),
]


def ours(cron: str, count: int) -> list[datetime]:
    from django_cluster_cron.schedule import fire_times

    return fire_times(cron, ZONE, AFTER, count)


def theirs(cron: str, count: int) -> list[datetime]:
    from cronsim import CronSim

    iterator = CronSim(cron, AFTER.astimezone(ZoneInfo(ZONE)))
    return [next(iterator) for _ in range(count)]


def timed(func: Any, cron: str, count: int) -> tuple[float, list[datetime]]:
    started = time.perf_counter()
    result = func(cron, count)
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=10_000, help="fire times per call")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--sizes", type=int, nargs="*", help="ignored: see --results")
    parser.add_argument("--quick", action="store_true", help="CI smoke run")
    parser.add_argument("--json", help="write the results here (see bench/README.md)")
    args = parser.parse_args()
    if args.quick:
        args.reps = 2

    rows: list[dict[str, Any]] = []
    ratios: list[dict[str, Any]] = []
    targets: list[dict[str, Any]] = []
    print(f"{args.results:,} fire times in {ZONE} after {AFTER:%Y-%m-%d}, {args.reps} reps")
    print(f"{'expression':<22} {'ours':>10} {'cronsim':>10} {'ours/cronsim':>13}")
    for label, cron, cronsim_cron in EXPRESSIONS:
        mine: list[float] = []
        other: list[float] = []
        for _ in range(args.reps):
            seconds, got = timed(ours, cron, args.results)
            mine.append(seconds * 1000)
            seconds, expected = timed(theirs, cronsim_cron, args.results)
            other.append(seconds * 1000)
        if got != [t.astimezone(timezone.utc) for t in expected]:
            raise SystemExit(f"{cron!r}: ours and cronsim disagree; see test_cron_differential")
        a, b = statistics.median(mine), statistics.median(other)
        print(f"{cron:<22} {a:>8.1f}ms {b:>8.1f}ms {a / b:>12.2f}x")
        variant = f"{cron} ({label})"
        rows += [
            row("ours", variant, args.results, "time for the fire times", "ms", mine),
            row("cronsim", variant, args.results, "time for the fire times", "ms", other),
        ]
        ratios.append({"label": f"ours / cronsim, {cron}", "value": a / b, "note": ""})
        if cron in ("* * * * * *", "0 9 * * 1-5"):
            met = a <= 2 * b
            targets.append(
                {
                    "target": f"fire_times within 2x of cronsim: {cron}",
                    "met": met,
                    "figure": f"{a / b:.2f}x ({a:.1f} ms vs {b:.1f} ms)",
                }
            )
            print(f"  target within 2x: {'MET' if met else 'NOT MET'}")
    write_json(
        args.json,
        {
            "workload": "cron_speed",
            "title": "Fire times: ours vs cronsim",
            "description": " ".join(__doc__.split("\n\n")[1].split()),
            "rows": rows,
            "ratios": ratios,
            "targets": targets,
        },
    )


if __name__ == "__main__":
    main()
