"""Per-run overhead of the worker side: claim + heartbeat thread + record, in milliseconds.

    .venv/bin/python bench/run_overhead.py [--runs 500] [--reps 3] [--quick] [--json PATH]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/run_overhead.py

Runs the same trivial task (``tests.add``) in one process, through Celery's ``apply`` (no
broker, so only our code differs): bare, as a peer's message runs it (django-celery-beat and
celery-redbeat publish the task itself: no claim, no ledger); as a recorded run's message, the
job's own task with the run's headers, through the wrapper a worker installs (claim UPDATE,
heartbeat thread start/stop, final UPDATE: what exactly-once and the run history cost; on the
process's own connection, as a worker runs them), with
Prometheus metrics off and on (``CLUSTER_CRON["METRICS"]``; on = prometheus_client in the
multiprocess mode a prefork worker uses); and, for comparison, as the old form
``django_cluster_cron.execute_run(run_id, attempt)``. Each repetition times --runs runs of each,
interleaved; the table gives the median per run (and p95) over a repetition, then the
median/min/max over repetitions. SQLite always; PostgreSQL too when
DATABASE_URL names one (each backend in its own process).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from _procs import row, write_json

HERE = Path(__file__).resolve()


def measure(runs: int, reps: int) -> dict[str, list[float]]:
    """In a child process whose database is set: per repetition, medians and p95 in ms."""
    from _env import boot

    # Metrics as a prefork worker keeps them: values in files (before prometheus_client loads).
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="bench-metrics-"))
    boot()
    # The suite's settings log each finished run at INFO to stderr; the bare task logs nothing
    # here, so keep the comparison to the claim and the record.
    logging.getLogger("django_cluster_cron").setLevel(logging.WARNING)
    from django.conf import settings
    from django.utils import timezone

    from django_cluster_cron.celery_app import get_celery_app
    from django_cluster_cron.ledger.outbox import OutboxMessage
    from django_cluster_cron.ledger.statements import use_own_connection
    from django_cluster_cron.models import JobDefinition, JobRun, RunTrigger
    from django_cluster_cron.tasks import execute_run
    from django_cluster_cron.worker.celery import deliver_here
    from tests.testapp.tasks import add

    app = get_celery_app()
    # As in a worker process: the claim and the record on the process's own connection (on
    # PostgreSQL, as prepared statements).
    use_own_connection()

    job = JobDefinition.objects.create(
        name="bench-overhead",
        cron="0 0 1 1 *",
        timezone="UTC",
        task="tests.add",
        args=[1, 2],
        enabled=False,
    )
    out: dict[str, list[float]] = {
        "bare": [],
        "ours": [],
        "ours_p95": [],
        "bare_p95": [],
        "metrics": [],
        "metrics_p95": [],
        "old": [],
        "old_p95": [],
        "floor": [],
    }
    from django.db import connection

    # The floor no worker claim can go under: two durable writes (the claim must be committed
    # before the body runs, the outcome after it), timed as two autocommitted UPDATEs of one row.
    touch = f"UPDATE {JobRun._meta.db_table} SET attempt = attempt WHERE id = %s"
    start = timezone.now().replace(microsecond=0)
    for rep in range(reps):
        slots = [start + timedelta(seconds=rep * 3 * runs + i) for i in range(3 * runs)]
        JobRun.objects.bulk_create(
            JobRun(
                job=job,
                scheduled_for=slot,
                task_id=job.task_id_for(slot),
                trigger=RunTrigger.MANUAL,
                status="queued",
            )
            for slot in slots
        )
        runs_now = list(
            JobRun.objects.filter(job=job, status="queued").select_related("job").order_by("pk")
        )
        messages = {run.pk: OutboxMessage.for_run(run) for run in runs_now}
        bare, wrapped, metered, old, floor = [], [], [], [], []
        for off, on, then in zip(runs_now[0::3], runs_now[1::3], runs_now[2::3], strict=True):
            with connection.cursor() as cursor:
                started = time.perf_counter()
                cursor.execute(touch, [off.pk])
                cursor.execute(touch, [off.pk])
                floor.append(time.perf_counter() - started)
            started = time.perf_counter()
            add.apply(args=[1, 2])
            bare.append(time.perf_counter() - started)
            settings.CLUSTER_CRON["METRICS"] = False
            started = time.perf_counter()
            deliver_here(app, messages[off.pk])
            wrapped.append(time.perf_counter() - started)
            started = time.perf_counter()
            execute_run.apply(args=[then.pk, 1], task_id=then.task_id)
            old.append(time.perf_counter() - started)
            settings.CLUSTER_CRON["METRICS"] = True
            started = time.perf_counter()
            deliver_here(app, messages[on.pk])
            metered.append(time.perf_counter() - started)
        done = JobRun.objects.filter(job=job, status="success").count()
        if done != (rep + 1) * 3 * runs:
            raise SystemExit(f"expected {(rep + 1) * 3 * runs} successful runs, found {done}")
        for key, values in (
            ("bare", bare),
            ("ours", wrapped),
            ("metrics", metered),
            ("old", old),
        ):
            out[key].append(statistics.median(values) * 1000)
            out[f"{key}_p95"].append(statistics.quantiles(values, n=20)[-1] * 1000)
        out["floor"].append(statistics.median(floor) * 1000)
    return out


def backends() -> list[tuple[str, dict[str, str]]]:
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)  # _env.boot() then makes a fresh SQLite file
    found = [("SQLite", env)]
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        found.append(("PostgreSQL", dict(os.environ)))
    elif url.startswith("mysql://"):
        found.append(("MySQL", dict(os.environ)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", help="ignored: the cost is per run")
    parser.add_argument("--runs", type=int, default=500, help="runs per repetition")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="CI smoke run (seconds)")
    parser.add_argument("--json", help="write the results here (see bench/README.md)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: one backend, to a file
    args = parser.parse_args()
    if args.runs < 20 or args.reps < 1:
        parser.error("--runs must be >= 20 (for a p95) and --reps >= 1")
    if args.child:
        Path(args.child).write_text(json.dumps(measure(args.runs, args.reps)))
        return
    if args.quick:
        args.runs, args.reps = 100, 1

    rows: list[dict[str, Any]] = []
    ratios: list[dict[str, Any]] = []
    print(f"{args.runs} runs x {args.reps} reps, task tests.add through Celery's apply()")
    print(
        f"{'database':<11} {'bare task':>10} {'job task':>10} {'p95':>8} {'overhead':>9}"
        f" {'2 commits':>10} {'ratio':>6} {'execute_run':>12}"
    )
    for name, env in backends():
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = [sys.executable, str(HERE), "--child", out.name]
            cmd += ["--runs", str(args.runs), "--reps", str(args.reps)]
            subprocess.run(cmd, env=env, check=True)
            result = json.loads(Path(out.name).read_text())
        overhead = [o - b for o, b in zip(result["ours"], result["bare"], strict=True)]
        beyond = [o - f for o, f in zip(overhead, result["floor"], strict=True)]
        bare_note = "what a peer's message runs: the task alone, no claim, no ledger"
        rows += [
            row("celery (bare task)", name, None, "per-run time", "ms", result["bare"], bare_note),
            row("celery (bare task)", name, None, "per-run time, p95", "ms", result["bare_p95"]),
            row("ours", name, None, "per-run time (the job's task)", "ms", result["ours"]),
            row("ours", name, None, "per-run time (the job's task), p95", "ms", result["ours_p95"]),
            row("ours, old form", name, None, "per-run time (execute_run)", "ms", result["old"]),
            row("ours", name, None, "overhead per run (ours - bare)", "ms", overhead),
            row(
                "database",
                name,
                None,
                "two autocommitted UPDATEs (the floor)",
                "ms",
                result["floor"],
                "the claim and the outcome must each be committed: no claim costs less",
            ),
            row("ours", name, None, "overhead beyond the two commits", "ms", beyond),
            row(
                "ours, metrics on",
                name,
                None,
                "per-run time (the job's task)",
                "ms",
                result["metrics"],
            ),
            row(
                "ours, metrics on",
                name,
                None,
                "metrics' cost per run (on - off)",
                "ms",
                [m - o for m, o in zip(result["metrics"], result["ours"], strict=True)],
            ),
        ]
        b, o = statistics.median(result["bare"]), statistics.median(result["ours"])
        m = statistics.median(result["metrics"])
        ratios.append({"label": f"ours / bare task, {name}", "value": o / b, "note": ""})
        ratios.append({"label": f"ours metrics on / off, {name}", "value": m / o, "note": ""})
        p95, extra = statistics.median(result["ours_p95"]), statistics.median(overhead)
        commits = statistics.median(result["floor"])
        ratios.append(
            {
                "label": f"overhead / two commits, {name}",
                "value": extra / commits,
                "note": "per-run overhead over its floor, two durable writes (aim: at most 2)",
            }
        )
        old_form = statistics.median(result["old"])
        print(
            f"{name:<11} {b:>8.3f}ms {o:>8.3f}ms {p95:>6.2f}ms {extra:>7.3f}ms"
            f" {commits:>8.3f}ms {extra / commits:>5.2f}x {old_form:>10.3f}ms"
            f"   metrics on: {m:.3f}ms (+{m - o:.3f}ms)"
        )
    write_json(
        args.json,
        {
            "workload": "run_overhead",
            "title": "Worker overhead: claim + record per run vs a bare Celery task",
            "description": " ".join(__doc__.split("\n\n")[1].split()),
            "rows": rows,
            "ratios": ratios,
            "targets": [],
        },
    )


if __name__ == "__main__":
    main()
