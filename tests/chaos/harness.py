"""The chaos harness: real schedulers and workers, injected faults, an independent witness.

    .venv/bin/python -m tests.chaos --seed 7 --duration 120
    CHAOS_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python -m tests.chaos
    DATABASE_URL=mysql://root@127.0.0.1:3306/test CHAOS_LEASE=database \
        .venv/bin/python -m tests.chaos

It creates a fresh database on the server ``CHAOS_DATABASE_URL`` (else ``DATABASE_URL``, else the
local PostgreSQL) names — PostgreSQL or MySQL/MariaDB — dropped at the end, and its own Redis
server (the Celery broker, and with ``CHAOS_LEASE=redis``, the default, the lease and the change
channel) on a free port, migrates the example project, creates ~20 jobs
on every-second and every-few-seconds schedules with mixed catch-up and overlap policies, and runs
3 ``run_scheduler`` nodes and 2 Celery workers of the example project (with
``CHAOS_TASKS=django``: 2 django-tasks-db ``db_worker`` processes, the jobs' tasks Django's own,
the database lease, and no Redis faults). Their task body,
``demo.witness``, writes every execution (job, slot, attempt, pid, start, end) to
``demo.Execution`` — a record of what actually ran, separate from the run ledger.

Faults come on a timetable drawn from the seed: an operator cancels a running run; SIGKILL the
leader; SIGSTOP it past the lease TTL
then SIGCONT; SIGTERM a node and start a new one; restart Redis; terminate every database
connection; SIGKILL a worker mid-task; publish duplicate copies of run messages to the broker;
cut the leader's link to the database or to Redis (refused or silent, past the lease TTL, then
healed: each scheduler reaches both through TCP proxies of its own, tests/support/netfault.py);
with ``CHAOS_POOLER=1`` every scheduler and worker reaches PostgreSQL through PgBouncer in
transaction mode (Debian's package: what falls back behind it, the session witness and LISTEN,
must not cost a guarantee);
and with ``CHAOS_OWN_POSTGRES=1`` (a throwaway PostgreSQL server on a free port, which gets
``BURST_JOBS`` more jobs firing together every ``BURST_EVERY`` seconds) restart that server, cleanly
or as a crash, just after a burst fired.

Then it stops the faults, lets the cluster settle, and checks, from the witness and the ledger:
no (job, slot, attempt) executed twice, and a slot executed more than once only as declared
retries; every slot inside the checked window has a run or a missed/skipped record; `skip`,
`buffer_all` and `cancel_other` jobs never ran two bodies at once; no run is left waiting, held
back or running; a run asked to stop never ran again; no buffer held more than its cap; each
fencing epoch belongs to one node and epochs never interleave. It prints a summary and exits
non-zero on any violation.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from tests.chaos.epochs import epoch_violations
from tests.chaos.pieces import PIECE_PLANS, PIECES, piece_violations
from tests.support.netfault import FaultyLink, port_of, url_through
from tests.support.pgserver import PostgresServer
from tests.support.timing import stalls, ttl_outlasting
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "example_project"
TTL = 2.0
POLL = 0.2
# CHAOS_TASKS=django: the jobs' tasks are django.tasks tasks run by django-tasks-db's db_worker
# processes, on the database lease: the database is the only server the cluster uses.
DJANGO_TASKS = os.environ.get("CHAOS_TASKS", "celery") == "django"
SETTINGS = {
    "LEASE_TTL": TTL,
    "POLL_INTERVAL": POLL,
    "RUN_HEARTBEAT_INTERVAL": 0.5,
    # Lost after a silence that three stalled heartbeats cannot make.
    "RUN_LOST_AFTER": ttl_outlasting(calls=3),
    "OUTBOX_REPUBLISH_AFTER": 2,
    "CATCHUP_CAP": 200,
    "LEASE_BACKEND": "database" if DJANGO_TASKS else os.environ.get("CHAOS_LEASE", "redis"),
}
FAULTS = (
    "cancel_running",
    "kill_leader",
    "pause_leader",
    "term_node",
    "restart_redis",
    "cut_db",
    "kill_worker",
    "duplicate_messages",
    "cut_leader_db",
    "cut_leader_redis",
    "restart_database",
)
# The witness task: Celery's, or its django.tasks twin.
WITNESS = "demo.djtasks.witness" if DJANGO_TASKS else "demo.witness"
COMPLETION = "demo.djtasks.completed" if DJANGO_TASKS else "demo.completed"
# Without Redis in the cluster (CHAOS_TASKS=django), its faults would change nothing.
REDIS_FAULTS = ("restart_redis", "cut_leader_redis")
# The cap of the chaos run's buffer_all jobs (checked: never more held back at once).
MAX_BUFFERED_CHAOS = 3
# The overlap policies that never run two bodies of a job at once (checked from the witness).
NEVER_TWO_AT_ONCE = ("skip", "buffer_all", "cancel_other")
# With a PostgreSQL server of its own (CHAOS_OWN_POSTGRES=1), these many jobs more fire together
# every BURST_EVERY seconds, and the server is restarted in the middle of such a burst.
BURST_JOBS = 100
BURST_EVERY = 10


def _devredis() -> ModuleType:
    spec = importlib.util.spec_from_file_location("devredis", ROOT / "scripts" / "devredis.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("devredis", module)
    spec.loader.exec_module(module)
    return module


def _is_mysql(url: str) -> bool:
    return url.startswith(("mysql://", "mysql2://", "mariadb://"))


@dataclass
class Report:
    faults: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)

    def fail(self, message: str) -> None:
        self.violations.append(message)


class Chaos:
    def __init__(
        self, seed: int, duration: float, workdir: Path, log: Callable[[str], None]
    ) -> None:
        self.seed = seed
        self.duration = duration
        self.random = random.Random(seed)
        self.workdir = workdir
        self.log = log
        self.report = Report()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.serial = itertools.count(1)
        self.redis: Any = None
        self.db_url = ""
        self.env: dict[str, str] = {}
        # Each scheduler reaches the database and Redis through links of its own (cut-able).
        self.links: dict[str, dict[str, FaultyLink]] = {}
        self.pg: PostgresServer | None = None
        self._pooler: Any = None  # CHAOS_POOLER: PgBouncer in front of the database
        self.replaced: set[str] = set()  # workers that exited and were started anew
        self.cancelled: set[int] = set()  # runs an operator (the cancel_running fault) cancelled
        self.deepest_buffer = 0  # the most runs a buffer_all job held back at once

    # -- infrastructure ------------------------------------------------------------------

    def start_services(self) -> None:
        self.redis = _devredis().RedisServer().start()
        if os.environ.get("CHAOS_OWN_POSTGRES"):
            # A server of its own, so that it can be restarted (never the shared one).
            self.pg = PostgresServer().start()
        admin_url = (
            (self.pg.url if self.pg is not None else None)
            or os.environ.get("CHAOS_DATABASE_URL")
            or os.environ.get("DATABASE_URL")
            or "postgres://postgres@127.0.0.1:5432/postgres"
        )
        name = f"dcc_chaos_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        if _is_mysql(admin_url):
            self._admin_sql(admin_url, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        else:
            self._admin_sql(admin_url, f'CREATE DATABASE "{name}"')
        parts = urlsplit(admin_url)
        direct = self.db_url = urlunsplit(parts._replace(path=f"/{name}"))
        self._db_name, self._admin_url = name, admin_url
        if os.environ.get("CHAOS_POOLER") and not _is_mysql(admin_url):
            # Every scheduler and worker reaches PostgreSQL through PgBouncer in transaction
            # mode (the harness itself, its checks and the migrations, directly).
            from tests.support.pgbouncer import pgbouncer

            upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
            pooler = pgbouncer(
                "transaction", 20, upstream=upstream, user=parts.username, max_clients=500
            )
            port = pooler.__enter__()
            self._pooler = pooler
            self.db_url = urlunsplit(
                parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}", path=f"/{name}")
            )
        self.env = {
            **os.environ,
            "DATABASE_URL": self.db_url,
            "REDIS_URL": self.redis.url,
            "CLUSTER_CRON_JSON": json.dumps(SETTINGS),
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
            "PYTHONPATH": os.pathsep.join([str(EXAMPLE), str(ROOT)]),
            "DEMO_TASKS": "django" if DJANGO_TASKS else "celery",
        }
        self.env.pop("CELERY_BROKER_URL", None)
        os.environ.update(
            {
                k: self.env[k]
                for k in (
                    "REDIS_URL",
                    "CLUSTER_CRON_JSON",
                    "DJANGO_SETTINGS_MODULE",
                    "DEMO_TASKS",
                )
            }
        )
        os.environ["DATABASE_URL"] = direct
        sys.path[:0] = [str(EXAMPLE), str(ROOT)]
        subprocess.run(
            [sys.executable, str(EXAMPLE / "manage.py"), "migrate", "-v", "0"],
            env={**self.env, "DATABASE_URL": direct},
            check=True,
        )
        import django

        django.setup()

    def _admin_sql(self, url: str, sql: str) -> None:
        if _is_mysql(url):
            import MySQLdb

            parts = urlsplit(url)
            conn = MySQLdb.connect(
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 3306,
                user=unquote(parts.username or "root"),
                password=unquote(parts.password or ""),
            )
            try:
                conn.cursor().execute(sql)
            finally:
                conn.close()
            return
        import psycopg

        with psycopg.connect(
            url.replace("postgres://", "postgresql://", 1), autocommit=True
        ) as conn:
            conn.execute(sql)

    def stop_services(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
        for proc in self.procs.values():
            proc.wait()
        from django.db import connections

        connections.close_all()
        for links in self.links.values():
            for link in links.values():
                link.close()
        if self.redis is not None:
            self.redis.stop()
        if self._pooler is not None:
            self._pooler.__exit__(None, None, None)
        if self.pg is not None:
            self.pg.close()  # the database goes with the server
        elif self.db_url and _is_mysql(self._admin_url):
            self._admin_sql(self._admin_url, f"DROP DATABASE IF EXISTS `{self._db_name}`")
        elif self.db_url:
            self._admin_sql(
                self._admin_url, f'DROP DATABASE IF EXISTS "{self._db_name}" WITH (FORCE)'
            )

    def spawn(self, role: str, command: list[str], name: str | None = None, **env: str) -> str:
        name = name or f"{role}-{next(self.serial)}"
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 (lives with the process)
        self.procs[name] = subprocess.Popen(
            command,
            env={**self.env, **env},
            cwd=EXAMPLE,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        return name

    def start_scheduler(self) -> str:
        name = f"scheduler-{next(self.serial)}"
        links = {
            "db": FaultyLink(port_of(self.db_url)),
            "redis": FaultyLink(port_of(self.redis.url)),
        }
        self.links[name] = links
        return self.spawn(
            "scheduler",
            [
                sys.executable,
                "manage.py",
                "run_scheduler",
                "--lease-ttl",
                str(TTL),
                "--poll-interval",
                str(POLL),
            ],
            name=name,
            DATABASE_URL=url_through(self.db_url, links["db"]),
            REDIS_URL=url_through(self.redis.url, links["redis"]),
        )

    def start_worker(self) -> str:
        name = f"worker-{next(self.serial)}"
        if DJANGO_TASKS:
            command = [sys.executable, "manage.py", "db_worker", "--queue-name", "*"]
            command += ["--interval", "0.1", "--no-reload", "--worker-id", name]
            return self.spawn("worker", command, name=name)
        return self.spawn(
            "worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "example_project",
                "worker",
                "--pool=solo",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=INFO",
                f"--hostname={name}@%h",
            ],
        )

    def restart_exited_workers(self) -> None:
        """db_worker exits when the database cuts its connection in its own statements; as the
        supervisor a deployment runs it under (systemd, Kubernetes), start another."""
        for name, proc in list(self.procs.items()):
            exited = proc.poll() is not None and proc.returncode >= 0  # not killed by a fault
            if name.startswith("worker") and exited and name not in self.replaced:
                self.replaced.add(name)
                self.log(f"{name} exited ({proc.returncode}); started {self.start_worker()}")

    def alive(self, role: str) -> list[str]:
        return [n for n, p in self.procs.items() if n.startswith(role) and p.poll() is None]

    def log_of(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def ready(self) -> bool:
        """Every worker is ready (Celery's ``ready.``, db_worker's ``Starting worker``) and a
        scheduler leads."""
        workers = self.alive("worker")
        line = "Starting worker" if DJANGO_TASKS else "ready."
        return self.leader() is not None and all(line in self.log_of(n) for n in workers)

    def caught_up(self, until: datetime) -> bool:
        """``until`` has passed and every job's slots up to it are decided (recorded, missed or
        skipped): no enabled job's next slot is at or before it."""
        from django.utils import timezone

        from django_cluster_cron.models import JobDefinition

        if timezone.now() <= until:
            return False
        return not JobDefinition.objects.filter(enabled=True, next_run_at__lte=until).exists()

    # -- jobs ----------------------------------------------------------------------------

    def create_jobs(self) -> None:
        from django_cluster_cron.models import JobDefinition

        plans = [
            ("* * * * * *", "all", "allow", 0.0),
            ("* * * * * *", "latest", "allow", 0.0),
            ("* * * * * *", "none", "allow", 0.0),
            ("* * * * * *", "all", "skip", 1.6),
            ("* * * * * *", "latest", "skip", 2.5),
            ("* * * * * *", "all", "buffer_one", 1.2),
            ("* * * * * */2", "all", "allow", 0.1),
            ("* * * * * */2", "latest", "skip", 3.0),
            ("* * * * * */3", "all", "allow", 0.3),
            ("* * * * * */3", "none", "allow", 0.0),
            ("* * * * * */4", "all", "skip", 5.0),
            ("* * * * * */5", "latest", "allow", 0.0),
            # Runs longer than their period: held back (at most MAX_BUFFERED_CHAOS), or the
            # newest preempting the running one.
            ("* * * * * */2", "all", "buffer_all", 3.0),
            ("* * * * * */3", "all", "cancel_other", 6.0),
        ]
        jobs = []
        for i in range(len(plans) + 8):
            cron, catchup, overlap, seconds = plans[i % len(plans)]
            job = JobDefinition(
                name=f"chaos-{i:02d}",
                cron=cron,
                timezone="UTC",
                task=WITNESS,
                kwargs={"seconds": seconds},
                catchup_policy=catchup,
                catchup_window=timedelta(minutes=10),
                overlap_policy=overlap,
                max_buffered=MAX_BUFFERED_CHAOS,
                max_retries=3,
                retry_backoff=0.5,
                retry_backoff_max=2,
                on_worker_lost="retry" if i % 2 else "fail",
            )
            job.full_clean()
            jobs.append(job)
        for i, (cron, parallel, seconds) in enumerate(PIECE_PLANS):
            split = JobDefinition(
                name=f"pieces-{i}",
                cron=cron,
                timezone="UTC",
                task=WITNESS,
                kwargs={"seconds": seconds},
                catchup_policy="all",
                catchup_window=timedelta(minutes=10),
                max_retries=3,
                retry_backoff=0.5,
                retry_backoff_max=2,
                on_worker_lost="retry",
                pieces=PIECES,
                max_parallel_pieces=parallel,
                max_failed_pieces=PIECES - 1,  # a piece failed by a fault does not fail the run
                on_complete=COMPLETION,
            )
            split.full_clean()
            jobs.append(split)
        if self.pg is not None:
            for i in range(BURST_JOBS):
                burst = JobDefinition(
                    name=f"burst-{i:03d}",
                    cron=f"* * * * * */{BURST_EVERY}",
                    timezone="UTC",
                    task=WITNESS,
                    catchup_policy="all",
                    catchup_window=timedelta(minutes=10),
                    max_retries=3,
                    retry_backoff=0.5,
                    retry_backoff_max=2,
                )
                burst.full_clean()
                jobs.append(burst)
        for job in jobs:
            job.save()
        self.log(f"created {len(jobs)} jobs")

    # -- faults --------------------------------------------------------------------------

    def leader(self) -> str | None:
        from django_cluster_cron.models import SchedulerLease

        holder = (
            SchedulerLease.objects.filter(name="leader").values_list("holder", flat=True).first()
        )
        for name, proc in self.procs.items():
            if holder and holder.endswith(f":{proc.pid}") and proc.poll() is None:
                return name
        return None

    def next_fault(self) -> str:
        """Every kind of fault once per round, in an order drawn from the seed."""
        if not getattr(self, "_round", None):
            self._round = [f for f in FAULTS if not (DJANGO_TASKS and f in REDIS_FAULTS)]
            self.random.shuffle(self._round)
        return str(self._round.pop())

    def inject(self, fault: str) -> bool:
        leader = self.leader()
        if fault in ("kill_leader", "pause_leader") and leader is None:
            return False
        if fault == "kill_leader":
            assert leader is not None
            self.procs[leader].kill()
            self.start_scheduler()
        elif fault == "pause_leader":
            assert leader is not None
            os.kill(self.procs[leader].pid, signal.SIGSTOP)
            # The pause outlasts the lease TTL, and a stall of the others on top.
            time.sleep(TTL + stalls(1) + self.random.random())
            os.kill(self.procs[leader].pid, signal.SIGCONT)
        elif fault == "term_node":
            victim = self.random.choice(self.alive("scheduler"))
            self.procs[victim].terminate()
            self.start_scheduler()
        elif fault == "restart_redis":
            self.redis.stop()
            time.sleep(self.random.uniform(0.5, 2.0))  # the outage's length
            self.redis.start()
        elif fault == "cut_db":
            self._terminate_backends()
        elif fault == "kill_worker":
            for _ in range(20):  # wait for a worker to be in the middle of a body
                if self._kill_a_busy_worker():
                    break
                time.sleep(0.25)  # look again, for 5 s at most
            else:
                return False
        elif fault == "duplicate_messages":
            self._duplicate_messages()
        elif fault == "cancel_running":
            if not self._cancel_a_running_run():
                return False
        elif fault in ("cut_leader_db", "cut_leader_redis"):
            if leader is None:
                return False
            link = self.links[leader]["db" if fault == "cut_leader_db" else "redis"]
            mode = self.random.choice(["refuse", "silence"])
            getattr(link, mode)()
            self.log(f"fault: {fault} ({mode}) on {leader}")
            time.sleep(self.random.uniform(1.5, 3.0) * TTL)  # the cut outlasts the lease TTL
            link.heal()
        elif fault == "restart_database":
            if self.pg is None:
                return False  # the shared server is never restarted
            # In the middle of a burst: as soon as the first run of the next one is sent.
            self._wait_for_a_burst()
            mode = self.random.choice(["fast", "immediate"])
            self.pg.restart(mode)
            self.log(f"fault: restart_database ({mode})")
        self.report.faults[fault] += 1
        self.log(f"fault: {fault}")
        return True

    def _wait_for_a_burst(self) -> None:
        from django.utils import timezone

        from django_cluster_cron.models import JobRun

        now = timezone.now()
        slot = now.replace(microsecond=0) + timedelta(
            seconds=BURST_EVERY - now.second % BURST_EVERY
        )
        wait_for(
            lambda: JobRun.objects.filter(
                job__name__startswith="burst-", scheduled_for=slot, queued_at__isnull=False
            ).exists(),
            3 * BURST_EVERY,
            f"the burst of {slot:%H:%M:%S} to be sent",
            interval=0.02,
        )

    def _terminate_backends(self) -> None:
        from tests.support.cluster import cut_other_connections

        for _ in range(3):
            cut_other_connections()
            time.sleep(0.3)  # the fault's rhythm: three cuts 0.3 s apart

    def _kill_a_busy_worker(self) -> bool:
        from django_cluster_cron.models import JobRun

        busy = JobRun.objects.filter(status="running").values_list("worker", flat=True)
        pids = {int(w.rsplit(":", 1)[1]) for w in busy if ":" in w}
        for name in self.alive("worker"):
            if self.procs[name].pid in pids:
                self.procs[name].kill()
                self.start_worker()
                return True
        return False

    def _cancel_a_running_run(self) -> bool:
        """An operator cancels a run in the middle of its body (the admin's button)."""
        from django_cluster_cron import actions
        from django_cluster_cron.models import JobRun

        def cancel_one() -> bool:
            busy = list(JobRun.objects.filter(status="running", cancel_requested_at=None)[:5])
            if not busy:
                return False
            run = self.random.choice(busy)
            try:
                actions.cancel(run, by="chaos", reason="cancelled by the chaos run")
            except actions.ActionRefused:
                return False  # it ended meanwhile: look again
            self.cancelled.add(run.pk)
            return True

        try:
            wait_for(cancel_one, 5, "a running run to cancel", interval=0.25)
        except AssertionError:
            return False  # nothing ran for 5 s: the fault is not injected this time
        return True

    def note_buffers(self) -> None:
        """The deepest buffer of a buffer_all job seen so far (checked against its cap)."""
        from django.db.models import Count

        from django_cluster_cron.models import JobRun

        depths = (
            JobRun.objects.filter(status="buffered", job__overlap_policy="buffer_all")
            .values("job_id")
            .annotate(depth=Count("id"))
        )
        for row in depths:
            self.deepest_buffer = max(self.deepest_buffer, row["depth"])

    def _duplicate_messages(self) -> None:
        from django_cluster_cron.dispatch import default_dispatcher
        from django_cluster_cron.ledger.outbox import OutboxMessage
        from django_cluster_cron.models import JobRun

        recent = (
            JobRun.objects.select_related("job")
            .exclude(status__in=["missed", "skipped", "cancelled"])
            .order_by("-scheduled_for")[:10]
        )
        messages = [OutboxMessage.for_run(run) for run in recent]
        default_dispatcher().publish(messages * 2)  # to the broker, or the tasks backend

    # -- the run -------------------------------------------------------------------------

    def run(self) -> Report:
        from django.utils import timezone

        self.start_services()
        try:
            for _ in range(3):
                self.start_scheduler()
            for _ in range(2):
                self.start_worker()
            self.create_jobs()
            # Warm-up: start-up takes seconds, more on a loaded machine.
            wait_for(self.ready, 120, "the workers to be ready and a leader elected", interval=0.25)
            window_start = timezone.now()
            deadline = time.monotonic() + self.duration
            while time.monotonic() < deadline:
                # The timetable: 3-8 s between faults, the buffers looked at every half second.
                until = time.monotonic() + self.random.uniform(3, 8)
                while time.monotonic() < until:
                    self.note_buffers()
                    time.sleep(0.5)
                self.restart_exited_workers()
                fault = self.next_fault()
                try:
                    self.inject(fault)
                except Exception as exc:  # a fault that could not be injected is not a result
                    self.log(f"fault {fault} not injected: {exc}")
                from django.db import connections

                connections.close_all()
            # The last fault heals: the window ends a take-over's time after it, and is checked
            # once a leader has decided every slot up to its end (the catch-up ran).
            window_end = timezone.now() + timedelta(seconds=TTL + stalls(2))
            try:
                wait_for(
                    lambda: self.caught_up(window_end),
                    120,
                    "a leader to decide every slot up to the window's end",
                    interval=0.25,
                )
            except AssertionError as exc:  # check() names the slots left without a record
                self.log(str(exc))
            self.settle()
            self.check(window_start, window_end)
        finally:
            self.stop_services()
        return self.report

    def settle(self) -> None:
        """Stop scheduling, let the workers finish what is in flight, stop everything."""
        from django_cluster_cron.models import OPEN_PIECE_STATUSES, JobDefinition, JobPiece, JobRun

        JobDefinition.objects.update(enabled=False, next_run_at=None)
        for name in self.alive("scheduler"):
            os.kill(self.procs[name].pid, signal.SIGCONT)
        # Longer than the longest re-publish wait (16 x OUTBOX_REPUBLISH_AFTER) plus a body.
        deadline = time.monotonic() + 120
        active = ["pending", "queued", "running", "retrying", "buffered", "terminating"]
        while time.monotonic() < deadline and (
            JobRun.objects.filter(status__in=active).exists()
            or JobPiece.objects.filter(status__in=OPEN_PIECE_STATUSES).exists()  # completions
        ):
            time.sleep(0.5)  # look again: what is left after the deadline, check() reports
        for name in self.alive("scheduler") + self.alive("worker"):
            self.procs[name].terminate()
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()

    # -- the checks ----------------------------------------------------------------------

    def _count_in_logs(self, needle: str) -> int:
        # Celery echoes our log lines through its own handler too: count distinct lines.
        lines: set[str] = set()
        for path in self.workdir.glob("*.log"):
            lines.update(
                line
                for line in path.read_text(errors="replace").splitlines()
                if needle in line and "django_cluster_cron" in line
            )
        return len(lines)

    def check(self, window_start: datetime, window_end: datetime) -> None:
        from demo.models import Execution

        from django_cluster_cron.models import JobDefinition, JobPiece, JobRun

        report = self.report
        runs = list(
            JobRun.objects.values(
                "id",
                "task_id",
                "piece_count",
                "job_id",
                "scheduled_for",
                "status",
                "publish_count",
                "trigger",
                "epoch",
                "dispatched_by",
                "created_at",
                "queued_at",
                "attempt",
                "error",
                "reason",
                "cancel_requested_at",
            )
        )
        executions = list(
            Execution._default_manager.values(
                "job_id", "slot", "attempt", "started_at", "finished_at", "task_id"
            )
        )
        by_slot: dict[tuple[int, datetime], list[dict[str, Any]]] = defaultdict(list)
        split = {r["task_id"] for r in runs if r["piece_count"]}
        for row in executions:
            if str(row["task_id"]).rpartition(".")[0] in split:
                continue  # a piece's body, or a completion: checked below, by piece
            by_slot[(row["job_id"], row["slot"])].append(row)

        # 1. No (job, slot) executed twice, except as declared retries of a failed attempt: each
        # attempt at most once, and never beyond the attempt the ledger ends on. (An attempt may
        # be missing: it can fail before the body runs, e.g. with Redis away for its lock.)
        final_attempt = {(r["job_id"], r["scheduled_for"]): r["attempt"] for r in runs}
        duplicates = 0
        for (job_id, slot), rows in by_slot.items():
            attempts = Counter(r["attempt"] for r in rows)
            for attempt, count in attempts.items():
                if count > 1:
                    duplicates += count - 1
                    report.fail(f"job {job_id} slot {slot:%H:%M:%S} attempt {attempt} ran {count}x")
            if max(attempts) > final_attempt.get((job_id, slot), 0):
                report.fail(
                    f"job {job_id} slot {slot:%H:%M:%S} ran attempts {sorted(attempts)} "
                    "the ledger does not declare"
                )

        # 2. Every slot inside the window has a run or a missed/skipped record.
        recorded = {(r["job_id"], r["scheduled_for"]) for r in runs}
        expected = 0
        for job in JobDefinition.all_objects.all():
            for slot in job.schedule.iter_after(window_start):
                if slot > window_end:
                    break
                expected += 1
                if (job.pk, slot) not in recorded:
                    report.fail(f"job {job.name} slot {slot:%H:%M:%S} has no record")

        # 3. `skip`, `buffer_all` and `cancel_other` jobs never overlapped (killed bodies have
        # no end and are left out).
        skip_jobs = set(
            JobDefinition.all_objects.filter(overlap_policy__in=NEVER_TWO_AT_ONCE).values_list(
                "pk", flat=True
            )
        )
        for job_id in skip_jobs:
            spans = sorted(
                (r["started_at"], r["finished_at"])
                for r in executions
                if r["job_id"] == job_id and r["finished_at"] is not None
            )
            for (_, end), (start, _) in itertools.pairwise(spans):
                if start < end:
                    report.fail(
                        f"job {job_id} ran two bodies at once: one started {start} before {end}"
                    )

        # 4. Nothing is left waiting, held back, running or being terminated.
        left = ("pending", "queued", "running", "retrying", "buffered", "terminating")
        stuck = [r for r in runs if r["status"] in left]
        for r in stuck[:10]:
            report.fail(
                f"run of job {r['job_id']} at {r['scheduled_for']:%H:%M:%S} stuck {r['status']}"
            )

        # 5. One holder per epoch, and epochs never interleave (see tests/chaos/epochs.py).
        for violation in epoch_violations(runs):
            report.fail(violation)

        # 6. A run asked to stop ended cancelled (or had ended before), never retried: no body
        # of its slot started after the request; no buffer held more than its cap.
        asked = {(r["job_id"], r["scheduled_for"]): r for r in runs if r["cancel_requested_at"]}
        for key, run in asked.items():
            later = [
                e for e in by_slot.get(key, []) if e["started_at"] > run["cancel_requested_at"]
            ]
            if later:
                report.fail(f"run {run['id']} asked to stop ran again: {later}")
            if run["status"] not in ("cancelled", "success", "failed", "skipped", "missed"):
                report.fail(f"run {run['id']} asked to stop is {run['status']}")
        for run_id in self.cancelled:
            status = next((r["status"] for r in runs if r["id"] == run_id), None)
            if status in ("retrying", "pending", "queued"):
                report.fail(f"run {run_id} cancelled by an operator went on: {status}")
        if self.deepest_buffer > MAX_BUFFERED_CHAOS:
            report.fail(
                f"a buffer_all job held {self.deepest_buffer} runs back (its cap: "
                f"{MAX_BUFFERED_CHAOS})"
            )

        # 7. Pieces: each executed once per attempt it declares, a completion for every run
        # that closed, none left running (tests/chaos/pieces.py).
        piece_rows = JobPiece.objects.values("run_id", "index", "status", "attempt")
        broken, piece_numbers = piece_violations(runs, piece_rows, executions)
        for violation in broken:
            report.fail(violation)

        pooler_found = self._count_in_logs("lease.witness_unavailable reason=pooler")
        if (
            self._pooler is not None
            and SETTINGS["LEASE_BACKEND"] == "database"
            and not pooler_found
        ):
            report.fail("no scheduler found the transaction-mode pooler it runs behind")

        statuses = Counter(r["status"] for r in runs)
        report.numbers = {
            "slots expected (window)": expected,
            "runs recorded": len(runs),
            "executed (job, slot)": len(by_slot),
            "executions (incl. retries)": len(executions),
            "succeeded": statuses["success"],
            "failed": statuses["failed"],
            "missed by policy": statuses["missed"],
            "skipped": statuses["skipped"],
            "cancelled": statuses["cancelled"],
            "cancelled by an operator": len(self.cancelled),
            "asked to stop (operator or cancel_other)": len(asked),
            "deepest buffer (cap 3)": self.deepest_buffer,
            "retried slots": sum(1 for rows in by_slot.values() if len(rows) > 1),
            "lost (worker died)": sum(1 for r in runs if "worker lost" in (r["error"] or "")),
            "duplicate deliveries dropped": self._count_in_logs("run.duplicate_delivery run="),
            "duplicate executions": duplicates,
            "epochs": len({r["epoch"] for r in runs if r["epoch"] is not None}),
            "faults injected": sum(report.faults.values()),
            "workers that exited, restarted": len(self.replaced),
            "nodes that found a pooler": pooler_found,
            **piece_numbers,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "1")))
    parser.add_argument(
        "--duration", type=float, default=float(os.environ.get("CHAOS_DURATION", "90"))
    )
    parser.add_argument("--keep-logs", action="store_true", help="print where the process logs are")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="dcc-chaos-"))
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[chaos {time.monotonic() - started:6.1f}s] {message}", flush=True)

    log(
        f"seed {args.seed}, {args.duration:g} s of faults, lease {SETTINGS['LEASE_BACKEND']}, "
        f"logs in {workdir}"
    )
    report = Chaos(args.seed, args.duration, workdir, log).run()
    print()
    print(f"{'seed':<32} {args.seed:>8}")
    for key, value in report.numbers.items():
        print(f"{key:<32} {value:>8}")
    for fault in FAULTS:
        print(f"  fault {fault:<24} {report.faults[fault]:>8}")
    if report.violations:
        print(f"\n{len(report.violations)} VIOLATION(S):")
        for violation in report.violations[:50]:
            print(f"  - {violation}")
        print(f"process logs: {workdir}")
        return 1
    print("\nall guarantees held")
    return 0
