"""Partitions: the leader's link to the database or to Redis refused or silent, three schedulers.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/partitions.py
        [--quick] [--reps 1] [--lease redis|database] [--fault redis-refused] [--json PATH]

Three `run_scheduler` nodes (shipped defaults: lease TTL 10 s, poll 1 s) run one every-second
job (`* * * * * *`, catch-up `all`) executed by one Celery worker (2 processes) into a witness
table. Each node reaches the database and Redis (its lease with the Redis lease backend, and the
broker) through a TCP proxy of its own (tests/support/netfault.py); the worker reaches both
directly. Once the cluster runs, the leader's proxy to one server is cut for FAULT seconds:
``refused`` (connections reset, new ones refused) or ``silent`` (nothing passes, connections
stay open), then healed. Per lease backend and fault it prints:

* **stood still** — the longest time between two dispatches (each run's ``queued_at``, the
  database's clock) from just before the fault to the end: the every-second cadence is 1 s;
* **slots lost** — seconds between the first and the last recorded slot with no run, plus runs
  not executed by the end (a missed or failed run);
* **slots run twice** — slots the witness table shows executed more than once.

Targets (with the shipped defaults): 0 lost and 0 run twice under every fault; a refused link:
a standby dispatches within 3 s; a silent one: within TTL + poll interval (11 s). The database is
PostgreSQL or MySQL/MariaDB (a SQLite file has no link to cut).
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from datetime import datetime, timedelta
from typing import Any

import _procs
from _env import boot
from _report import Report, parser

FAULTS = [
    ("database", "refused"),
    ("database", "silent"),
    ("redis", "refused"),
    ("redis", "silent"),
]
LEASES = ["redis", "database"]
NODES = ("a", "b", "c")


def clean() -> None:
    from django.db import connection

    from django_cluster_cron.models import JobChange, JobDefinition, JobRun, SchedulerLease
    from tests.testapp.models import Execution

    with connection.cursor() as cursor:
        for model in (Execution, JobRun, JobChange, JobDefinition, SchedulerLease):
            cursor.execute(f"DELETE FROM {model._meta.db_table}")
    _procs.flush_broker(os.environ["REDIS_URL"])


def make_job() -> Any:
    from django_cluster_cron.models import JobDefinition

    job = JobDefinition(
        name="every-second",
        cron="* * * * * *",
        timezone="UTC",
        task="tests.witness_slot",
        catchup_policy="all",
        catchup_window=timedelta(minutes=10),
    )
    job.full_clean()
    job.save()
    return job


def database_now() -> datetime:
    from django_cluster_cron.dbtime import database_now as now

    return now()


def leader_of(job: Any) -> str | None:
    from django_cluster_cron.models import JobRun

    latest = JobRun.objects.filter(job=job, queued_at__isnull=False).order_by("-queued_at").first()
    return latest.dispatched_by if latest else None


def standing_by(nodes: list[str]) -> bool:
    from django_cluster_cron.ops.status import cluster_status

    seen = {n.get("node"): n.get("role") for n in cluster_status(runs=False).nodes}
    return all(seen.get(node) in ("standby", "leader") for node in nodes)


def one_round(env: dict[str, str], lease: str, server: str, mode: str, fault: float) -> dict:
    from django_cluster_cron.models import JobRun, RunStatus
    from tests.support.netfault import FaultyLink, port_of, url_through
    from tests.testapp.models import Execution

    clean()
    job = make_job()
    db_url, redis_url = env["DATABASE_URL"], env["REDIS_URL"]
    links = {
        node: {
            "database": FaultyLink(port_of(db_url)),
            "redis": FaultyLink(port_of(redis_url)),
        }
        for node in NODES
    }
    settings = {"LEASE_BACKEND": lease, "CATCHUP_CAP": 1000}
    procs = {}
    worker = _procs.start_worker(env, f"w-{lease}-{server}-{mode}", concurrency=2)
    try:
        for node in NODES:
            node_env = dict(
                env,
                DATABASE_URL=url_through(db_url, links[node]["database"]),
                REDIS_URL=url_through(redis_url, links[node]["redis"]),
            )
            procs[node] = _procs.start_ours(node_env, node, settings=settings)
            if node == NODES[0]:
                _procs.wait_until(lambda: leader_of(job), 60, "a first dispatch")
        _procs.wait_until(lambda: standing_by(list(NODES)), 60, "every node reporting")
        time.sleep(3)  # a few seconds of the steady cadence before the fault
        leader = leader_of(job)
        assert leader in links, leader
        cut_at = database_now()
        link = links[leader][server]
        link.refuse() if mode == "refused" else link.silence()
        time.sleep(fault)
        link.heal()
        healed_at = database_now()
        # Catch-up after the fault, then every run executed.
        _procs.wait_until(
            lambda: JobRun.objects.filter(
                job=job, scheduled_for__gt=healed_at + timedelta(seconds=3)
            ).exists(),
            120,
            "dispatch after the fault",
        )
        # Slots due by now have been sent; later ones a next leader would send.
        stopped_at = database_now() - timedelta(seconds=2)
        for proc in procs.values():
            _procs.stop(proc)
        waiting = JobRun.objects.filter(job=job, scheduled_for__lte=stopped_at).exclude(
            status__in=[RunStatus.SUCCESS, RunStatus.MISSED, RunStatus.FAILED]
        )
        deadline = time.monotonic() + 120
        while waiting.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        for proc in procs.values():
            _procs.stop(proc)
        _procs.stop(worker)
        for pair in links.values():
            for one in pair.values():
                one.close()

    runs = list(
        JobRun.objects.filter(job=job, scheduled_for__lte=stopped_at)
        .order_by("scheduled_for")
        .values_list("scheduled_for", "queued_at", "status")
    )
    slots = [r[0] for r in runs]
    gaps = sum(
        int((b - a).total_seconds()) - 1
        for a, b in itertools.pairwise(slots)
        if b - a > timedelta(seconds=1)
    )
    not_run = [(r[0], r[2]) for r in runs if r[2] != RunStatus.SUCCESS]
    if gaps or not_run:
        print(f"  lost: {gaps} gaps; not run: {not_run[:5]}", flush=True)
    sent = sorted(r[1] for r in runs if r[1] is not None)
    window = [t for t in sent if t >= cut_at - timedelta(seconds=2)]
    still = max(
        ((b - a).total_seconds() for a, b in itertools.pairwise(window)), default=float("nan")
    )
    counts: dict[str, int] = {}
    for label in Execution.objects.filter(label__startswith=f"{job.pk}@").values_list(
        "label", flat=True
    ):
        counts[label] = counts.get(label, 0) + 1
    twice = sum(1 for c in counts.values() if c > 1)
    return {"still": still, "lost": gaps + len(not_run), "twice": twice, "leader": leader}


def main() -> None:
    cli = parser(__doc__ or "", reps=1)
    cli.add_argument("--lease", choices=LEASES, help="one lease backend only")
    cli.add_argument(
        "--fault",
        choices=[f"{server}-{mode}" for server, mode in FAULTS],
        help="one fault only, e.g. redis-refused",
    )
    args = cli.parse_args()
    report = Report(
        "partitions",
        "Partitions: the leader's link to the database or Redis refused or silent",
        "Three schedulers, each through its own proxy; the leader's link cut, then healed.",
    )
    env = boot()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import override_settings

    if connection.vendor not in ("postgresql", "mysql"):
        print("partitions: needs PostgreSQL or MySQL/MariaDB (DATABASE_URL); SQLite has no link")
        report.write(args.json)
        return
    fault = 8.0 if args.quick else 25.0
    faults = FAULTS[:1] if args.quick else FAULTS
    if args.fault:
        faults = [f for f in FAULTS if f"{f[0]}-{f[1]}" == args.fault]
    print(f"  logs: {_procs.log_dir()}  fault: {fault:g} s", flush=True)
    for lease in [args.lease] if args.lease else LEASES:
        for server, mode in faults:
            with override_settings(CLUSTER_CRON={**settings.CLUSTER_CRON, "LEASE_BACKEND": lease}):
                found = [one_round(env, lease, server, mode, fault) for _ in range(args.reps)]
            variant = f"{lease} lease, {server} {mode}"
            report.row(
                "ours", None, "stood still", "s", [f["still"] for f in found], variant=variant
            )
            report.row("ours", None, "slots lost", "", [f["lost"] for f in found], variant=variant)
            report.row(
                "ours", None, "slots run twice", "", [f["twice"] for f in found], variant=variant
            )
            worst = max(f["still"] for f in found)
            bound = 3.0 if mode == "refused" else 11.0
            report.target(
                f"{variant}: standby within {bound:g} s, none lost or twice",
                worst <= bound and not any(f["lost"] or f["twice"] for f in found),
                f"stood still {worst:.2f} s, lost {sum(f['lost'] for f in found)}, "
                f"twice {sum(f['twice'] for f in found)}",
            )
    report.write(args.json)


if __name__ == "__main__":
    sys.exit(main())
