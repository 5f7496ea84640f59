"""Admin page cost: queries and time for the jobs list and the run ledger at scale.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/admin_pages.py
    .venv/bin/python bench/admin_pages.py --runs 100000          # SQLite, smaller ledger

Creates --jobs jobs and --runs runs spread over them (PostgreSQL: one INSERT … SELECT over
generate_series; elsewhere bulk inserts), then loads each page --repeat times through Django's test
client and prints the query count and the median time per page.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _env import boot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--explain", action="store_true", help="show each page's slowest queries")
    args = parser.parse_args()
    boot()

    from datetime import timedelta

    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    from django_cluster_cron.models import JobDefinition, JobRun
    from tests.support.querycount import count_queries

    now = timezone.now().replace(microsecond=0)
    JobDefinition.objects.bulk_create(
        JobDefinition(
            name=f"bench-{i:04d}",
            cron="* * * * *",
            timezone="UTC",
            task="tests.add",
            args=[1, 2],
            last_scheduled_at=now,
            next_run_at=now + timedelta(minutes=1),
        )
        for i in range(args.jobs)
    )
    job_ids = list(JobDefinition.objects.order_by("pk").values_list("pk", flat=True))
    started = time.perf_counter()
    statuses = ["success", "success", "success", "failed", "missed", "skipped"]
    if connection.vendor == "postgresql":
        table = JobRun._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                INSERT INTO {table} (job_id, scheduled_for, status, task_id, trigger, attempt,
                    dispatched_by, epoch, duration, worker, reason, result, error, traceback,
                    created_at, updated_at)
                SELECT j.ids[1 + (g %% %s)], %s - (g || ' seconds')::interval,
                       (ARRAY{statuses!r})[1 + (g %% 6)], 'bench-' || g, 'schedule', 1,
                       'bench', 1, interval '1 second' * (g %% 7), 'bench:1', '', '', '', '',
                       %s, %s
                FROM generate_series(1, %s) AS g, (SELECT %s::bigint[] AS ids) AS j
                """,
                [len(job_ids), now, now, now, args.runs, job_ids],
            )
            cursor.execute(f"ANALYZE {table}")
    else:
        batch = []
        for g in range(1, args.runs + 1):
            batch.append(
                JobRun(
                    job_id=job_ids[g % len(job_ids)],
                    scheduled_for=now - timedelta(seconds=g),
                    status=statuses[g % 6],
                    task_id=f"bench-{g}",
                    trigger="schedule",
                    duration=timedelta(seconds=g % 7),
                )
            )
            if len(batch) == 10_000:
                JobRun.objects.bulk_create(batch)
                batch = []
        JobRun.objects.bulk_create(batch)
    print(
        f"{args.jobs} jobs, {JobRun.objects.count():,} runs created in "
        f"{time.perf_counter() - started:.1f} s ({connection.vendor})"
    )

    User.objects.filter(username="bench").delete()
    User.objects.create_superuser("bench", password="bench")
    client = Client()
    client.login(username="bench", password="bench")
    day = (now - timedelta(hours=1)).date()
    pages = [
        ("jobs list (all jobs on one page)", "/admin/django_cluster_cron/jobdefinition/?all="),
        ("jobs list, 50 per page", "/admin/django_cluster_cron/jobdefinition/"),
        ("runs list", "/admin/django_cluster_cron/jobrun/"),
        ("runs list, status=failed", "/admin/django_cluster_cron/jobrun/?status__exact=failed"),
        ("runs list, one job", f"/admin/django_cluster_cron/jobrun/?job__id__exact={job_ids[0]}"),
        (
            "runs list, one day",
            f"/admin/django_cluster_cron/jobrun/?scheduled_for__year={day.year}"
            f"&scheduled_for__month={day.month}&scheduled_for__day={day.day}",
        ),
        ("runs list, page 50", "/admin/django_cluster_cron/jobrun/?p=50"),
        ("cluster status", "/admin/django_cluster_cron/clusterstatus/"),
    ]
    print(f"{'page':<36} {'queries':>7} {'median':>10} {'max':>10}")
    for label, url in pages:
        with count_queries() as queries:
            response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        timings = []
        for _ in range(args.repeat):
            begin = time.perf_counter()
            client.get(url)
            timings.append(time.perf_counter() - begin)
        print(
            f"{label:<36} {len(queries):>7} {statistics.median(timings) * 1000:>8.1f}ms "
            f"{max(timings) * 1000:>8.1f}ms"
        )
        if args.explain:
            for sql, seconds in sorted(queries.queries, key=lambda q: -q[1])[:3]:
                print(f"    {seconds * 1000:8.1f}ms  {sql[:150]}")


if __name__ == "__main__":
    main()
