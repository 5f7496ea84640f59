"""Django's tasks beside Celery: N jobs due at one instant, through django-tasks-db and Celery.

    .venv/bin/python bench/on_django_tasks.py [--jobs 10000] [--workers 4] [--rounds 1]
                                           [--systems celery django-tasks-db] [--json PATH]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/on_django_tasks.py

Same run, same database, same scheduler (one ``run_scheduler`` with its shipped defaults: it
records the runs ahead of their instant), the same trivial body (``a + b``) with the same four
processes executing it: for Celery one prefork worker with ``--concurrency 4`` on a throwaway
Redis broker; for django-tasks-db four ``db_worker`` processes polling every 0.1 s when idle
(their default is 1 s), the database their only server. Every figure comes from the ledger,
per run, seconds after its slot: *sent* (``queued_at``: the message in the broker, or the task
in the backend's table), *started* (``started_at``, the claim) and *finished* (``finished_at``,
the body returned); p50, p99 and max, the median over rounds. Beside them the backend's own
limit (*django-tasks-db bare*): the same N tasks enqueued straight onto django-tasks-db before
the four workers start, timed from the first task's start. On a backend that can defer
(django-tasks-db), runs recorded ahead are enqueued ahead with ``run_after`` at their instant:
their *sent* is when the leader recorded them sent at the instant, not when the row was made.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from _procs import (
    flush_broker,
    log_dir,
    percentile,
    row,
    spawn,
    start_ours,
    start_worker,
    stop,
    wait_until,
    write_json,
)

ROOT = Path(__file__).resolve().parent.parent
LEAD = 25.0  # seconds from creating the jobs to their fire time
TASKS = {"celery": "tests.add", "django-tasks-db": "tests.testapp.dtasks.add"}
# The backend's own limit: the same N tasks enqueued straight onto django-tasks-db beforehand,
# drained by the same workers, timed from the first one's start (no scheduler, no ledger).
BARE = "django-tasks-db bare"
SYSTEMS = [*TASKS, BARE]
STAGES = ("sent", "started", "finished")


def start_db_workers(env: dict[str, str], name: str, count: int) -> list[object]:
    """``count`` django-tasks-db ``db_worker`` processes; returns once each polls."""
    workers = []
    for index in range(count):
        worker = f"{name}-{index + 1}"
        cmd = [sys.executable, "-m", "django", "db_worker", "--queue-name", "*"]
        cmd += ["--interval", "0.1", "--no-reload", "--worker-id", worker]
        workers.append(spawn(cmd, dict(env, TEST_CLUSTER_CRON="{}"), worker))
        log = log_dir() / f"{worker}.log"

        def started(log: Path = log) -> bool:
            return "Starting worker" in log.read_text(errors="replace")

        wait_until(started, 120, worker)
    return workers


def bare_drain(env: dict[str, str], jobs: int, workers: int, name: str) -> dict:
    """``jobs`` bare ``add`` tasks enqueued on django-tasks-db in one transaction, the workers
    already polling: each task's seconds from the first start to its own start and end."""
    from django.db import transaction
    from django_tasks_db.models import DBTaskResult

    from tests.testapp import dtasks

    DBTaskResult.objects.all().delete()
    procs = start_db_workers(env, f"{name}-db-worker", workers)
    try:
        with transaction.atomic():  # all of them appear at once, at the commit
            for i in range(jobs):
                dtasks.add.enqueue(i, 1)  # type: ignore[attr-defined]
        done = DBTaskResult.objects.filter(status="SUCCESSFUL")
        wait_until(lambda: done.count() >= jobs, 900, f"{jobs} bare tasks to succeed")
        rows = list(done.values_list("started_at", "finished_at"))
        first = min(started for started, _ in rows)
        return {
            "sent": [0.0] * len(rows),
            "started": [(started - first).total_seconds() for started, _ in rows],
            "finished": [(finished - first).total_seconds() for _, finished in rows],
        }
    finally:
        for proc in procs:
            stop(proc)


def trial(env: dict[str, str], system: str, jobs: int, workers: int, name: str) -> dict:
    """One burst through ``system``: per stage, each run's seconds after its slot."""
    from django.db import connection
    from django_tasks_db.models import DBTaskResult

    from django_cluster_cron.models import JobDefinition, JobRun, RunStatus

    with connection.cursor() as cursor:
        for model in (JobRun, JobDefinition, DBTaskResult):
            cursor.execute(f"DELETE FROM {model._meta.db_table}")
    flush_broker(env["REDIS_URL"])
    if system == BARE:
        return bare_drain(env, jobs, workers, name)
    if system == "celery":
        procs = [start_worker(env, f"{name}-worker", workers)]
    else:
        procs = start_db_workers(env, f"{name}-db-worker", workers)
    now = datetime.now(timezone.utc)
    fire = (now + timedelta(seconds=LEAD)).replace(microsecond=0)
    cron = f"{fire.minute} {fire.hour} * * * {fire.second}"
    JobDefinition.objects.bulk_create(
        (
            JobDefinition(
                name=f"burst-{i}",
                cron=cron,
                timezone="UTC",
                task=TASKS[system],
                args=[i, 1],
                last_scheduled_at=now,
                next_run_at=fire,
            )
            for i in range(jobs)
        ),
        batch_size=2000,
    )
    procs.append(start_ours(env, f"{name}-scheduler"))
    try:
        done = JobRun.objects.filter(status=RunStatus.SUCCESS)
        wait_until(lambda: done.count() >= jobs, LEAD + 900, f"{jobs} runs to succeed")
        rows = done.values_list("scheduled_for", "queued_at", "started_at", "finished_at")
        found: dict[str, list[float]] = {stage: [] for stage in STAGES}
        for slot, *stamps in rows:
            for stage, stamp in zip(STAGES, stamps, strict=True):
                found[stage].append((stamp - slot).total_seconds())
        return found
    finally:
        for proc in procs:
            stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=4, help="processes executing the runs")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS)
    parser.add_argument("--quick", action="store_true", help="CI smoke run: 200 jobs, 1 round")
    parser.add_argument("--json", help="write the results here (see bench/README.md)")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds = 200, 1
    from _env import boot

    env = boot()
    database = os.environ["DATABASE_URL"].split(":", 1)[0]
    print(
        f"{args.jobs} jobs due at one instant, a + b, {args.workers} processes executing; "
        f"database {database}; logs in {log_dir()}"
    )
    samples: dict[str, list[dict[str, float]]] = {system: [] for system in args.systems}
    for round_ in range(args.rounds):
        order = list(args.systems) if round_ % 2 == 0 else list(reversed(args.systems))
        for system in order:
            lat = trial(env, system, args.jobs, args.workers, f"r{round_ + 1}-{system}")
            found = {
                f"{stage} {q}": percentile(lat[stage], q) for stage in STAGES for q in (50, 99)
            }
            found["finished max"] = max(lat["finished"])
            samples[system].append(found)
            print(f"  round {round_ + 1} {system:<16} " + "  ".join(
                f"{k} {v:6.2f}s" for k, v in found.items()
            ))  # fmt: skip
    keys = list(samples[args.systems[0]][0])
    print(f"{'system':<17}" + "".join(f"{k:>15}" for k in keys) + "   (median over rounds)")
    medians: dict[str, dict[str, float]] = {}
    rows = []
    for system in args.systems:
        medians[system] = {k: statistics.median(s[k] for s in samples[system]) for k in keys}
        print(f"{system:<17}" + "".join(f"{medians[system][k]:14.2f}s" for k in keys))
        for key in keys:
            values = [s[key] for s in samples[system]]
            rows.append(row(system, database, args.jobs, f"fire to {key}", "s", values))
    ratios = []
    pairs = [("django-tasks-db", "celery"), ("django-tasks-db", BARE)]
    for ours, other in pairs:
        if {ours, other} <= set(args.systems):
            for key in ("finished 50", "finished 99"):
                value = medians[ours][key] / medians[other][key]
                label = f"{ours} / {other}, fire to {key}"
                ratios.append({"label": label, "value": value, "note": ""})
                print(f"{label}: {value:.2f}")
    write_json(
        args.json,
        {
            "workload": "on_django_tasks",
            "title": "Django's tasks (django-tasks-db) beside Celery, N jobs due at one instant",
            "description": " ".join(__doc__.split("\n\n")[1].split()),
            "rows": rows,
            "ratios": ratios,
            "targets": [],
        },
    )
    print(json.dumps(medians))


if __name__ == "__main__":
    main()
