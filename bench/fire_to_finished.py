"""Fire time to the job's code finished: N jobs due at one instant, a real prefork worker.

    .venv/bin/python bench/fire_to_finished.py [--jobs 10000] [--concurrency 4] [--rounds 2]
                                               [--code DIR ...] [--json PATH]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/fire_to_finished.py

What users look at: when their job ran. N jobs (``tests.add``) share one fire time a little
ahead; one ``run_scheduler`` leads with its shipped defaults (it records the runs ahead and
sends them at the instant), one Celery worker (prefork, --concurrency processes, INFO log as a
worker usually runs) executes them. Each run's latency is read from the ledger: its
``finished_at`` (the database's clock, written when the body returned) minus its slot. p50, p99
and max per round; the median over rounds.

``--code DIR`` (repeatable) runs the scheduler and the worker from another checkout of the
project (its app and its tests; e.g. a ``git worktree`` of an earlier commit); rounds alternate
the order of the checkouts, so that a machine that warms up or slows down favours none. The
database schema is migrated with this checkout's code: compare commits whose migrations agree.
"""

from __future__ import annotations

import argparse
import json
import statistics
from datetime import datetime, timedelta, timezone
from pathlib import Path

from _procs import log_dir, percentile, row, start_ours, start_worker, stop, wait_until, write_json

ROOT = Path(__file__).resolve().parent.parent
LEAD = 25.0  # seconds from creating the jobs to their fire time


def trial(env: dict[str, str], code: Path, jobs: int, concurrency: int, name: str) -> list[float]:
    """One burst from ``code``: each run's (finished_at - slot) in seconds."""
    from _procs import flush_broker
    from django.db import connection

    from django_cluster_cron.models import JobDefinition, JobRun, RunStatus

    with connection.cursor() as cursor:
        for model in (JobRun, JobDefinition):
            cursor.execute(f"DELETE FROM {model._meta.db_table}")
    flush_broker(env["REDIS_URL"])

    worker = start_worker(env, f"{name}-worker", concurrency, code)
    now = datetime.now(timezone.utc)
    fire = (now + timedelta(seconds=LEAD)).replace(microsecond=0)
    cron = f"{fire.minute} {fire.hour} * * * {fire.second}"
    JobDefinition.objects.bulk_create(
        (
            JobDefinition(
                name=f"burst-{i}",
                cron=cron,
                timezone="UTC",
                task="tests.add",
                args=[i, 1],
                last_scheduled_at=now,
                next_run_at=fire,
            )
            for i in range(jobs)
        ),
        batch_size=2000,
    )
    leader = start_ours(env, f"{name}-scheduler", code=code)
    try:
        done = JobRun.objects.filter(status=RunStatus.SUCCESS)
        wait_until(lambda: done.count() >= jobs, LEAD + 600, f"{jobs} runs to succeed")
        rows = done.values_list("scheduled_for", "finished_at")
        return [(finished - slot).total_seconds() for slot, finished in rows]
    finally:
        stop(leader)
        stop(worker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--code", action="append", help="a checkout to run (repeatable)")
    parser.add_argument("--quick", action="store_true", help="CI smoke run: 200 jobs, 1 round")
    parser.add_argument("--json", help="write the results here (see bench/README.md)")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds = 200, 1
    from _env import boot

    env = boot()
    codes = [Path(c).resolve() for c in (args.code or [str(ROOT)])]
    labels = [c.name if c != ROOT else "this checkout" for c in codes]
    samples: dict[str, list[dict[str, float]]] = {label: [] for label in labels}
    print(
        f"{args.jobs} jobs due at one instant, tests.add, one prefork worker "
        f"(--concurrency {args.concurrency}); logs in {log_dir()}"
    )
    for round_ in range(args.rounds):
        order = list(zip(codes, labels, strict=True))
        if round_ % 2:
            order.reverse()
        for code, label in order:
            name = f"r{round_ + 1}-{labels.index(label)}"
            lat = trial(env, code, args.jobs, args.concurrency, name)
            found = {
                "p50": percentile(lat, 50),
                "p99": percentile(lat, 99),
                "max": max(lat),
            }
            samples[label].append(found)
            print(
                f"  round {round_ + 1} {label:<24} p50 {found['p50']:7.2f}s  "
                f"p99 {found['p99']:7.2f}s  max {found['max']:7.2f}s"
            )
    print(f"{'checkout':<26} {'p50':>8} {'p99':>8} {'max':>8}   (median over rounds)")
    medians: dict[str, dict[str, float]] = {}
    rows = []
    for label in labels:
        medians[label] = {
            key: statistics.median(s[key] for s in samples[label]) for key in ("p50", "p99", "max")
        }
        m = medians[label]
        print(f"{label:<26} {m['p50']:7.2f}s {m['p99']:7.2f}s {m['max']:7.2f}s")
        for key in ("p50", "p99", "max"):
            values = [s[key] for s in samples[label]]
            rows.append(
                row(label, "PostgreSQL", args.jobs, f"fire to finished, {key}", "s", values)
            )
    ratios = []
    if len(labels) == 2:
        first, second = labels
        for key in ("p50", "p99"):
            value = medians[second][key] / medians[first][key]
            ratios.append({"label": f"{second} / {first}, {key}", "value": value, "note": ""})
            print(f"{second} / {first}, {key}: {value:.2f}")
    write_json(
        args.json,
        {
            "workload": "fire_to_finished",
            "title": "Fire time to the job's code finished, one burst, a real prefork worker",
            "description": " ".join(__doc__.split("\n\n")[1].split()),
            "rows": rows,
            "ratios": ratios,
            "targets": [],
        },
    )
    print(json.dumps(medians))


if __name__ == "__main__":
    main()
