"""What the claim and the record cost a run, one run a statement or many: CPU, client and server.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench \\
        .venv/bin/python bench/claim_batching.py [--runs 5000] [--batches 10 50] [--reps 3]

PostgreSQL only, on this machine (the server's CPU is read from ``/proc`` for the benchmark's
own server process). N queued runs of one job each are claimed and recorded as a success:

* **one at a time**: the worker's own statements (``ledger/statements.py``: ``claim_run``, then
  ``finish_run``), prepared, on the worker's own connection, as a pool process runs them;
* **in batches of B**: the same assignments and the same returned columns (the run and its job,
  built into model instances), for B runs a statement (``id = ANY(...)``), then one record
  statement for the B. No worker claims in batches today: this measures what a design that did
  (the worker's main process claiming what it has prefetched) would save on the statements.

Printed: ms of CPU a run in this process (psycopg, Django, building the instances) and in the
server process, and the wall time a run, medians over ``--reps``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import timedelta
from typing import Any

from _cpu import stat


def server_cpu(pid: int) -> float:
    read = stat(pid)
    if read is None:
        raise SystemExit(f"cannot read the CPU time of the server process {pid} in /proc")
    return read[1]


def client_cpu() -> float:
    used = os.times()
    return used.user + used.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--batches", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    from _env import boot

    boot()
    from django.db import connection
    from django.utils import timezone

    from django_cluster_cron.ledger import statements
    from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger

    if connection.vendor != "postgresql":
        raise SystemExit("claim_batching.py measures PostgreSQL: set DATABASE_URL to one")
    statements.use_own_connection()
    connection.ensure_connection()
    own, compiled = statements._for()
    with own.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]

    def fill(n: int) -> list[tuple[int, str]]:
        JobRun.objects.all().delete()
        JobDefinition.all_objects.all().delete()
        jobs = JobDefinition.objects.bulk_create(
            JobDefinition(
                name=f"bench-{i}",
                cron="0 0 1 1 *",
                timezone="UTC",
                task="tests.add",
                args=[1, 2],
                enabled=False,
            )
            for i in range(n)
        )
        slot = timezone.now().replace(microsecond=0) - timedelta(seconds=1)
        runs = JobRun.objects.bulk_create(
            JobRun(
                job=job,
                scheduled_for=slot,
                task_id=job.task_id_for(slot),
                trigger=RunTrigger.SCHEDULE,
                status=RunStatus.QUEUED,
            )
            for job in jobs
        )
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {JobRun._meta.db_table}")
        return [(run.pk, run.task_id) for run in runs]

    success = {"status": str(RunStatus.SUCCESS), "result": "3", "duration": timedelta(0)}

    def one_at_a_time(runs: list[tuple[int, str]]) -> None:
        for run_id, task_id in runs:
            claimed = statements.claim_run(run_id, task_id, 1, "bench:1")
            assert claimed is not None
            assert statements.finish_run(run_id, 1, success) == 1

    s = compiled
    assign, now, table = s.assign, s.now, s.run_table
    job_table = connection.ops.quote_name(JobDefinition._meta.db_table)
    claim_many = (
        f"UPDATE {table} SET {assign['status']} = %s, {assign['started_at']} = {now},"
        f" {assign['heartbeat_at']} = {now}, {assign['worker']} = %s,"
        f" {assign['finished_at']} = NULL, {assign['duration']} = NULL,"
        f" {assign['retry_at']} = NULL FROM {job_table}"
        f" WHERE {s.column('id')} = ANY(%s) AND {s.column('status')} IN (%s, %s, %s)"
        f" AND {job_table}.id = {s.column('job')}"
        f" RETURNING {s.run.sql}, {s.job.sql}"
    )
    finish_many = (
        f"UPDATE {table} SET {assign['status']} = %s, {assign['result']} = %s,"
        f" {assign['duration']} = %s, {assign['finished_at']} = {now}"
        f" WHERE {s.column('id')} = ANY(%s) AND {s.column('status')} = %s"
    )
    claimable = [str(status) for status in statements.CLAIMABLE]

    def batched(runs: list[tuple[int, str]], size: int) -> None:
        split = len(s.run.fields)
        for start in range(0, len(runs), size):
            ids = [run_id for run_id, _ in runs[start : start + size]]
            with statements._cursor(own, claim_many) as cursor:
                statements._execute(
                    cursor, claim_many, [str(RunStatus.RUNNING), "bench:1", ids, *claimable]
                )
                for row in cursor.fetchall():
                    run = s.run.build(row[:split], own)
                    run.job = s.job.build(row[split:], own)
                assert cursor.rowcount == len(ids)
            with statements._cursor(own, finish_many) as cursor:
                statements._execute(
                    cursor,
                    finish_many,
                    [str(RunStatus.SUCCESS), "3", timedelta(0), ids, str(RunStatus.RUNNING)],
                )

    ways: list[tuple[str, Any]] = [("one at a time", one_at_a_time)]
    ways += [(f"batches of {b}", lambda runs, b=b: batched(runs, b)) for b in args.batches]
    print(
        f"{args.runs} queued runs claimed and recorded, PostgreSQL, medians of {args.reps}; "
        "ms a run"
    )
    print(f"  {'':<16} {'client CPU':>11} {'server CPU':>11} {'wall':>8}")
    for label, way in ways:
        client, server, wall = [], [], []
        for _ in range(args.reps):
            runs = fill(args.runs)
            c0, s0, w0 = client_cpu(), server_cpu(backend), time.perf_counter()
            way(runs)
            wall.append((time.perf_counter() - w0) * 1000 / args.runs)
            client.append((client_cpu() - c0) * 1000 / args.runs)
            server.append((server_cpu(backend) - s0) * 1000 / args.runs)
            done = JobRun.objects.filter(status=RunStatus.SUCCESS).count()
            assert done == args.runs, f"{label}: {done} of {args.runs} recorded"
        print(
            f"  {label:<16} {statistics.median(client):11.3f} {statistics.median(server):11.3f}"
            f" {statistics.median(wall):8.3f}"
        )


if __name__ == "__main__":
    main()
