"""Per-run overhead of the worker side: claim + heartbeat thread + record, in milliseconds.

    .venv/bin/python bench/run_overhead.py [--runs 500]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/run_overhead.py

Runs the same trivial task (``tests.add``) two ways in one process, through Celery's ``apply``
(no broker, so only our code differs): bare, and wrapped by ``django_cluster_cron.execute_run``
for a recorded run (claim UPDATE, SELECT, heartbeat thread start/stop, final UPDATE). Prints the
median of each and the difference: the overhead a run pays for exactly-once and the ledger.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

from _env import boot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    boot()

    from django.utils import timezone

    from django_cluster_cron.models import JobDefinition, JobRun, RunTrigger
    from django_cluster_cron.tasks import execute_run
    from tests.testapp.tasks import add

    job = JobDefinition.objects.create(
        name="bench-overhead",
        cron="0 0 1 1 *",
        timezone="UTC",
        task="tests.add",
        args=[1, 2],
        enabled=False,
    )
    start = timezone.now().replace(microsecond=0)
    runs = JobRun.objects.bulk_create(
        JobRun(
            job=job,
            scheduled_for=start + timedelta(seconds=i),
            task_id=job.task_id_for(start + timedelta(seconds=i)),
            trigger=RunTrigger.MANUAL,
            status="queued",
        )
        for i in range(args.runs)
    )
    runs = list(JobRun.objects.filter(job=job).order_by("pk"))

    bare, wrapped = [], []
    for run in runs:
        started = time.perf_counter()
        add.apply(args=[1, 2])
        bare.append(time.perf_counter() - started)
        started = time.perf_counter()
        execute_run.apply(args=[run.pk, 1], task_id=run.task_id)
        wrapped.append(time.perf_counter() - started)
    assert JobRun.objects.filter(job=job, status="success").count() == args.runs

    b, w = statistics.median(bare) * 1000, statistics.median(wrapped) * 1000
    p95 = statistics.quantiles(wrapped, n=20)[-1] * 1000
    print(f"{args.runs} runs, task tests.add through Celery's apply()")
    print(f"bare task           median {b:7.3f} ms")
    print(f"execute_run (ours)  median {w:7.3f} ms   p95 {p95:7.3f} ms")
    print(f"overhead per run    median {w - b:7.3f} ms")


if __name__ == "__main__":
    main()
