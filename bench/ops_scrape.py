"""Operating from outside: the health check and a /metrics scrape at small and large N.

    .venv/bin/python bench/ops_scrape.py [--sizes 100 100000] [--runs-per-job 10] [--reps 20]
        [--quick] [--json PATH]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/ops_scrape.py

For each N: N jobs and N x --runs-per-job runs in the ledger (a mix of statuses, a few waiting
and running), a leader that has ticked (Redis lease), then --reps times: ``cluster_health()``
(SQL queries counted, time per call) and the scheduler's /metrics text (prometheus_client's
``generate_latest`` over what the process exports). Target (issue 15): constant queries; the
time at the largest N close to the smallest.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import _peers as peers
from _env import boot
from _report import Report, parser, sizes_and_reps

DESCRIPTION = (
    "N jobs (0 * 1 1 *, idle) and N x runs-per-job JobRun rows (one in 100 queued, one in 1,000 "
    "running with a fresh heartbeat, the rest success), a leader ticked once. cluster_health() "
    "without the broker check (it would time the broker): SQL queries of one call and the median "
    "time of --reps calls. /metrics: prometheus_client's generate_latest over the process's "
    "registry, median of --reps."
)


def fill_runs(n_jobs: int, per_job: int) -> int:
    """Insert the ledger rows in bulk (generate_series on PostgreSQL, batches elsewhere)."""
    from django.db import connection
    from django.utils import timezone

    from django_cluster_cron.models import JobDefinition, JobRun

    total = n_jobs * per_job
    now = timezone.now()
    if connection.vendor == "postgresql":
        table = JobRun._meta.db_table
        first = JobDefinition.objects.order_by("pk").values_list("pk", flat=True)[0]
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                INSERT INTO {table} (job_id, scheduled_for, task_id, status, trigger, attempt,
                    dispatched_by, reason, result, error, traceback, worker, publish_count,
                    created_at, updated_at)
                SELECT %s + (g %% %s), %s - (g * interval '1 second'), 'bench-' || g,
                    CASE WHEN g %% 1000 = 0 THEN 'running' WHEN g %% 100 = 0 THEN 'queued'
                         ELSE 'success' END,
                    'schedule', 1, 'bench', '', '', '', '', '', 1, %s, %s
                FROM generate_series(1, %s) AS g
                """,
                [first, n_jobs, now, now, now, total],
            )
            cursor.execute(f"UPDATE {table} SET heartbeat_at = %s WHERE status = 'running'", [now])
            cursor.execute(f"ANALYZE {table}")
        return total
    jobs = list(JobDefinition.objects.values_list("pk", flat=True))
    batch = []
    for g in range(1, total + 1):
        status = "running" if g % 1000 == 0 else "queued" if g % 100 == 0 else "success"
        batch.append(
            JobRun(
                job_id=jobs[g % len(jobs)],
                scheduled_for=now - timedelta(seconds=g),
                task_id=f"bench-{g}",
                status=status,
                heartbeat_at=now if status == "running" else None,
            )
        )
        if len(batch) == 5000:
            JobRun.objects.bulk_create(batch)
            batch = []
    JobRun.objects.bulk_create(batch)
    return total


def main() -> None:
    cli = parser(__doc__ or "", reps=20)
    cli.add_argument("--runs-per-job", type=int, default=10)
    args = cli.parse_args()
    sizes, reps = sizes_and_reps(args)
    boot()
    peers.quiet()
    from prometheus_client import REGISTRY, generate_latest

    from django_cluster_cron.models import JobRun
    from django_cluster_cron.ops.health import cluster_health
    from django_cluster_cron.scheduler import build_scheduler
    from django_cluster_cron.testing import NoWait
    from tests.support.querycount import count_queries

    report = Report("ops_scrape", "Health check and /metrics scrape", DESCRIPTION)
    medians: dict[tuple[str, int], float] = {}
    for n in sizes:
        peers.setup_ours(n, peers.IDLE)
        runs = fill_runs(n, args.runs_per_job)
        scheduler = build_scheduler(node_id=f"ops-{n}", sleeper=NoWait(), stop=threading.Event())
        try:
            scheduler.step()
            with count_queries() as log:
                cluster_health(broker=False)
            report.row("ours", n, f"health: SQL queries ({runs:,} runs)", "queries", [len(log)])
            timings, scrapes = [], []
            for _ in range(reps):
                started = time.perf_counter()
                cluster_health(broker=False)
                timings.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                generate_latest(REGISTRY)
                scrapes.append((time.perf_counter() - started) * 1000)
        finally:
            scheduler.shutdown()
        medians["health", n] = report.row("ours", n, "health check time", "ms", timings)["median"]
        medians["metrics", n] = report.row("ours", n, "/metrics render time", "ms", scrapes)[
            "median"
        ]
        JobRun.objects.all().delete()
        peers.clear_ours()
    small, large = sizes[0], sizes[-1]
    for what in ("health", "metrics"):
        report.ratio(
            f"{what}: time at N={large:,} / N={small:,}",
            medians[what, large] / medians[what, small],
        )
    queries = {
        report.find("ours", f"health: SQL queries ({n * args.runs_per_job:,} runs)", n)["median"]  # type: ignore[index]
        for n in sizes
    }
    report.target(
        "Health: constant SQL queries",
        len(queries) == 1,
        f"{', '.join(f'{q:g}' for q in sorted(queries))} per check at N="
        + ", ".join(f"{n:,}" for n in sizes),
    )
    report.write(args.json)


if __name__ == "__main__":
    main()
