"""Cost of an idle scheduler tick (no job due) as the number of jobs grows.

    .venv/bin/python bench/idle_tick.py                 # N = 100 and 10,000
    .venv/bin/python bench/idle_tick.py --sizes 100 10000 100000

For each N: creates N jobs none of which is due, lets a leader take the lease, then times
`Scheduler.step()` (median of --repeat ticks) and counts its SQL queries. Prints the ratio of
each size's time to the smallest size's. Target (DESIGN §7): constant queries, time at
N=100,000 within 2x of N=100.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

from _env import boot

from django_cluster_cron.testing import NoWait


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    boot()

    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from django_cluster_cron.models import JobDefinition
    from django_cluster_cron.scheduler import build_scheduler

    rows = []
    created = 0
    now = timezone.now()
    for size in sorted(args.sizes):
        JobDefinition.objects.bulk_create(
            (
                JobDefinition(
                    name=f"idle-{i}",
                    cron="0 0 1 1 *",
                    timezone="UTC",
                    task="tests.add",
                    last_scheduled_at=now,
                    next_run_at=now + timedelta(days=365),
                )
                for i in range(created, size)
            ),
            batch_size=2000,
        )
        created = size
        scheduler = build_scheduler(node_id=f"bench-{size}", sleeper=NoWait())
        scheduler.step()  # take the lease, first outbox sweep
        with CaptureQueriesContext(connection) as queries:
            scheduler.step()
        timings = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            scheduler.step()
            timings.append(time.perf_counter() - started)
        scheduler.shutdown()
        rows.append((size, len(queries), statistics.median(timings)))

    base = rows[0][2]
    print(f"{'jobs':>9} {'queries/tick':>13} {'median tick':>12} {'vs smallest':>12}")
    for size, count, median in rows:
        print(f"{size:>9,} {count:>13} {median * 1000:>10.3f}ms {median / base:>11.2f}x")


if __name__ == "__main__":
    main()
