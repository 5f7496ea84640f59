"""The job side at scale: a million jobs, none due, then a few due, in one run against a thousand.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/dccbench .venv/bin/python bench/job_scale.py
    DATABASE_URL=mysql://root@127.0.0.1:3306/dccbench .venv/bin/python bench/job_scale.py
    .venv/bin/python bench/job_scale.py --sizes 1000 100000        # SQLite

For each N of --sizes (jobs made in SQL: PostgreSQL's generate_series, MariaDB's sequence engine,
SQLite a recursive CTE; every one hourly at a minute none of them is due in):

* the idle tick: SQL queries of one tick, and the median of --ticks ticks;
* the scheduler's memory: the peak of Python's allocations (tracemalloc) while it is built and
  ticks --ticks times;
* look-ahead: --due of the N jobs (overlap policy ``allow``) made due at the coming minute; the
  tick that records them ahead (time and queries);
* changing one job: ``JobDefinition.save()`` of one job (time and queries) and the next tick,
  which must see it;
* the admin's jobs list: the first page, a search by name, the ``enabled`` filter, one task
  (queries, database time and the whole page, p95 of --repeat);
* ``manage.py cron list``: every job in one table (queries and seconds), up to --list-most jobs.

Targets (issue 49): with 1,000,000 jobs the idle tick is still one query and the scheduler's
memory flat (within 1.2x of N=1,000); the pages' database time under 200 ms. Issue 50: ``cron
list`` with 100,000 jobs one query, under a second.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from datetime import timedelta
from typing import Any

import _peers as peers
from _env import boot


def make_jobs(n: int, cron: str) -> None:
    """N jobs with ``cron`` whose next run is a day away, inserted by the database itself."""
    from django.db import connection
    from django.utils import timezone

    from django_cluster_cron.models import JobDefinition
    from tests.support.statistics import analyze

    peers.clear_ours()
    now = timezone.now().replace(microsecond=0)
    table = JobDefinition._meta.db_table
    fields = [
        f
        for f in JobDefinition._meta.concrete_fields
        if not f.primary_key and f.attname not in ("name", "last_scheduled_at", "next_run_at")
    ]
    # Every other column takes its model default, as a bulk insert would.
    sample = JobDefinition(cron=cron, timezone="UTC", task=peers.TASK, args=peers.ARGS)
    values = [f.get_db_prep_save(f.pre_save(sample, add=True), connection) for f in fields]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    holders = ", ".join(["%s"] * len(fields))
    vendor = connection.vendor
    if vendor == "postgresql":
        source, name = "generate_series(1, %s) AS g", "'bench-' || g"
    elif vendor == "mysql":
        source, name = "(SELECT seq AS g FROM seq_1_to_%s) AS s", "CONCAT('bench-', g)"
    else:
        source = (
            "(WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < %s) "
            "SELECT g FROM n)"
        )
        name = "'bench-' || g"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (name, last_scheduled_at, next_run_at, {columns}) "
            f"SELECT {name}, %s, %s, {holders} FROM {source}",
            [now, now + timedelta(days=1), *values, n],
        )
    analyze(table, vacuum=True)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def measure(n: int, args: argparse.Namespace) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.utils import timezone

    from django_cluster_cron.conf import app_settings
    from django_cluster_cron.models import JobDefinition, JobRun
    from tests.support.querycount import count_queries

    found: dict[str, Any] = {}
    began = time.perf_counter()
    make_jobs(n, peers.IDLE)
    found["set-up s"] = time.perf_counter() - began

    tracemalloc.start()
    scheduler = peers.build_ours(f"jobs-{n}")
    try:
        scheduler.step()
        with count_queries() as log:
            scheduler.step()
        found["idle tick queries"] = len(log)
        ticks = []
        for _ in range(args.ticks):
            begin = time.perf_counter()
            scheduler.step()
            ticks.append(time.perf_counter() - begin)
        found["idle tick ms"] = statistics.median(ticks) * 1000
        found["memory peak MiB"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()

        # Look-ahead: --due jobs whose slot is the coming minute, recorded ahead by one tick.
        slot = peers.minute_floor(timezone.now()) + timedelta(minutes=1)
        if slot - timezone.now() < timedelta(seconds=5):
            time.sleep((slot - timezone.now()).total_seconds() + 0.1)
            slot += timedelta(minutes=1)
        assert slot - timezone.now() < app_settings.LOOKAHEAD
        ids = list(JobDefinition.objects.order_by("pk").values_list("pk", flat=True)[: args.due])
        JobDefinition.objects.filter(pk__in=ids).update(
            overlap_policy="allow",  # only these are recorded ahead; others decide at the slot
            cron=f"{slot.minute} {slot.hour} * * *",
            last_scheduled_at=timezone.now() - timedelta(seconds=1),
            next_run_at=slot,
        )
        with count_queries() as log:
            begin = time.perf_counter()
            scheduler.step()
            found["look-ahead tick ms"] = (time.perf_counter() - begin) * 1000
        found["look-ahead tick queries"] = len(log)
        found["look-ahead runs recorded"] = JobRun.objects.filter(job_id__in=ids).count()

        # Change one job: its save, then the tick that must see it.
        job = JobDefinition.objects.exclude(pk__in=ids).order_by(
            "-pk"
        ).first() or JobDefinition.objects.get(pk=ids[0])
        job.cron = "* * * * *"
        with count_queries() as log:
            begin = time.perf_counter()
            job.save()
            found["change one job: save ms"] = (time.perf_counter() - begin) * 1000
        found["change one job: save queries"] = len(log)
        begin = time.perf_counter()
        scheduler.step()
        found["change one job: next tick ms"] = (time.perf_counter() - begin) * 1000
    finally:
        scheduler.shutdown()
        if tracemalloc.is_tracing():
            tracemalloc.stop()

    # The operator's terminal: every job in one table (up to --list-most jobs).
    if n <= args.list_most:
        import io

        from django.core.management import call_command

        out = io.StringIO()
        with count_queries() as log:
            begin = time.perf_counter()
            call_command("cron", "list", stdout=out)
            found["cron list s"] = time.perf_counter() - begin
        # Statements that read (a SET LOCAL turning off PostgreSQL's JIT is not one).
        found["cron list queries"] = sum(1 for sql, _ in log.queries if not sql.startswith("SET "))
        assert out.getvalue().count("\n") >= n, "cron list: a job is missing"

    User.objects.filter(username="bench").delete()
    User.objects.create_superuser("bench", password="bench")
    client = Client()
    client.login(username="bench", password="bench")
    jobs = "/admin/django_cluster_cron/jobdefinition/"
    for label, url in (
        ("jobs list", jobs),
        ("jobs list, search a name", jobs + f"?q=bench-{n // 2}"),
        ("jobs list, enabled=no", jobs + "?enabled__exact=0"),
        ("jobs list, one task", jobs + f"?task__exact={peers.TASK}"),
    ):
        db, whole = [], []
        for _ in range(args.repeat):
            with count_queries() as log:
                begin = time.perf_counter()
                response = client.get(url)
                whole.append(time.perf_counter() - begin)
            assert response.status_code == 200, (url, response.status_code)
            db.append(log.seconds)
        found[f"{label}: queries"] = len(log)
        found[f"{label}: db p95 ms"] = p95(db) * 1000
        found[f"{label}: page p95 ms"] = p95(whole) * 1000
    peers.clear_ours()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 1_000_000])
    parser.add_argument("--ticks", type=int, default=100)
    parser.add_argument("--due", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument(
        "--list-most", type=int, default=100_000, help="the most jobs `cron list` is timed with"
    )
    args = parser.parse_args()
    boot()
    peers.quiet()
    measure(
        max(10, args.due + 1), args
    )  # imports, templates and first connections: not the N's to compare
    results = {n: measure(n, args) for n in sorted(args.sizes)}
    sizes = sorted(results)
    print(f"{'':<40}" + "".join(f"{f'N={n:,}':>14}" for n in sizes))
    for key in results[sizes[0]]:
        cells = [results[n].get(key) for n in sizes]
        print(f"{key:<40}" + "".join("—".rjust(14) if c is None else f"{c:>14,.2f}" for c in cells))
    small, large = results[sizes[0]], results[sizes[-1]]
    memory = large["memory peak MiB"] / small["memory peak MiB"]
    print(
        f"\nidle tick queries at N={sizes[-1]:,}: {large['idle tick queries']} (target 1); "
        f"memory peak {memory:.2f}x of N={sizes[0]:,} (target <= 1.2x); idle tick "
        f"{large['idle tick ms'] / small['idle tick ms']:.2f}x"
    )


if __name__ == "__main__":
    main()
