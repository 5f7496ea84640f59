"""What one heartbeat costs, before and with its cancel channel, in one run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/heartbeat.py [--beats 2000] [--runs 1 8 64] [--reps 5]

A worker process stamps every run it executes with one statement per beat. Three ways, on the
same rows, interleaved rep by rep:

* **before** — the beat of 0.2 (an ORM ``UPDATE … WHERE (id, attempt) … AND status =
  'running'``), which brought nothing back;
* **with cancels, none asked** — :func:`django_cluster_cron.ledger.heartbeats.stamp` (PostgreSQL
  and SQLite: ``UPDATE … RETURNING`` the runs asked to stop; MariaDB and MySQL: the UPDATE
  skips them and, as every run was stamped, nothing more is sent);
* **with cancels, one asked** — the same with one of the runs asked to stop (on MariaDB the
  beat then reads which, and stamps it: the rare path).

Printed: µs per beat (wall, this process) for each, medians of ``--reps``, and the ratio to
*before*. Any database ``DATABASE_URL`` names (default: SQLite).
"""

from __future__ import annotations

import argparse
import functools
import operator
import statistics
import time
from collections.abc import Callable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beats", type=int, default=2000)
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    from _env import boot

    boot()
    from django.db import connection
    from django.db.models import Q
    from django.utils import timezone

    from django_cluster_cron.dbtime import DbNow
    from django_cluster_cron.ledger import heartbeats
    from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger

    def fill(n: int) -> dict[int, int]:
        JobRun.objects.all().delete()
        JobDefinition.all_objects.all().delete()
        job = JobDefinition.objects.create(
            name="bench-heartbeat",
            cron="0 0 1 1 *",
            timezone="UTC",
            task="tests.add",
            args=[1, 2],
            enabled=False,
        )
        now = timezone.now().replace(microsecond=0)
        runs = JobRun.objects.bulk_create(
            JobRun(
                job=job,
                scheduled_for=now - timezone.timedelta(seconds=i + 1),
                task_id=f"bench-{i}",
                trigger=RunTrigger.SCHEDULE,
                status=RunStatus.RUNNING,
                started_at=now,
            )
            for i in range(n)
        )
        return {run.pk: 1 for run in runs}

    def before(runs: dict[int, int]) -> None:
        match = functools.reduce(
            operator.or_, (Q(pk=run_id, attempt=attempt) for run_id, attempt in runs.items())
        )
        JobRun.objects.filter(match, status=RunStatus.RUNNING).update(heartbeat_at=DbNow())

    def with_cancels(runs: dict[int, int]) -> None:
        heartbeats.stamp(runs)

    def per_beat(way: Callable[[dict[int, int]], None], runs: dict[int, int]) -> float:
        started = time.perf_counter()
        for _ in range(args.beats):
            way(runs)
        return (time.perf_counter() - started) * 1e6 / args.beats

    print(
        f"one heartbeat of a worker process, {connection.vendor}, {args.beats} beats, "
        f"medians of {args.reps}; µs a beat (ratio to before)"
    )
    print(f"  {'runs':>5} {'before':>10} {'none asked':>18} {'one asked':>18}")
    for n in args.runs:
        runs = fill(n)
        asked_one = next(iter(runs))
        times: dict[str, list[float]] = {"before": [], "none": [], "one": []}
        for _ in range(args.reps):
            JobRun.objects.update(cancel_requested_at=None)
            times["before"].append(per_beat(before, runs))
            times["none"].append(per_beat(with_cancels, runs))
            JobRun.objects.filter(pk=asked_one).update(cancel_requested_at=DbNow())
            assert heartbeats.stamp(runs).keys() == {asked_one}
            times["one"].append(per_beat(with_cancels, runs))
        base = statistics.median(times["before"])
        none, one = statistics.median(times["none"]), statistics.median(times["one"])
        print(
            f"  {n:>5} {base:>10.1f} {none:>10.1f} ({none / base:.2f}) "
            f"{one:>10.1f} ({one / base:.2f})"
        )


if __name__ == "__main__":
    main()
