"""The demo: starts the cluster, shows it live (or plays the story unattended), stops it all."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit, urlunsplit

import redis
from django.conf import settings
from django.utils import timezone

from django_cluster_cron.models import SchedulerLease

from . import snapshot
from .narrator import Narrator
from .procs import ROOT, Child, Supervisor, tail
from .snapshot import Snapshot
from .view import Scene

SERVICES = ("celery-worker", "db-worker-1", "db-worker-2", "web", "redis")


@dataclass
class Options:
    lease_ttl: float = 3.0
    poll_interval: float = 0.5
    port: int = 8000
    own_redis_port: int | None = None  # start (and own) a Redis on this port
    login: str = "admin / admin"
    # "celery": a Celery worker and Redis; "django": django.tasks on two db_workers, no Redis.
    tasks: str = "celery"


class DemoError(RuntimeError):
    """Something the demo needs did not start; the message says what and where to look."""


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def node_name(index: int) -> str:
    return f"demo-{chr(ord('a') + index)}" if index < 26 else f"demo-{index + 1}"


class Demo:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.log_dir = Path(tempfile.mkdtemp(prefix="cluster-cron-demo-"))
        env = dict(os.environ)
        # Short lease and quick re-sends so the story plays in seconds (the defaults are 10 s
        # and 30 s); anything the user set in CLUSTER_CRON_JSON wins.
        cluster_cron = {
            "LEASE_TTL": options.lease_ttl,
            "POLL_INTERVAL": options.poll_interval,
            "OUTBOX_REPUBLISH_AFTER": 5,
            "RUN_HEARTBEAT_INTERVAL": 2,
            "RUN_LOST_AFTER": 20,
        }
        cluster_cron.update(json.loads(env.get("CLUSTER_CRON_JSON") or "{}"))
        env["CLUSTER_CRON_JSON"] = json.dumps(cluster_cron)
        env["PYTHONUNBUFFERED"] = "1"
        self.supervisor = Supervisor(self.log_dir, env)
        self.redis_url: str = settings.REDIS_URL
        self.started_at = timezone.now()
        self.nodes_started = 0
        self.redis_stopped_at: float | None = None
        epoch = SchedulerLease.objects.filter(name="leader").values_list("epoch", flat=True).first()
        self.narrator = Narrator(epoch, snapshot.takeover)
        self.notice = ""
        self.worker_restarts = 0
        self.failures: list[str] = []  # children that exited on their own, with their log tails

    # -- processes ---------------------------------------------------------------------------

    @property
    def lease_backend(self) -> str:
        from django_cluster_cron.leases import backend_name

        return backend_name()

    @property
    def owns_redis(self) -> bool:
        return self.options.own_redis_port is not None

    @property
    def without_redis(self) -> bool:
        """Django's own tasks on the database: no Redis, no broker."""
        return self.options.tasks == "django"

    @property
    def nodes_kept(self) -> int:
        """How many schedulers the demo keeps running."""
        return 3 if self.without_redis else 2

    def start(self) -> None:
        if self.without_redis:
            for name in ("db-worker-1", "db-worker-2"):
                self.start_db_worker(name)
        else:
            if self.owns_redis:
                self.start_redis()
            elif not self.redis_answers():
                raise DemoError(f"Redis at {redact(self.redis_url)} does not answer PING")
            self.start_worker()
        for _ in range(self.nodes_kept):
            self.add_node()
        self.supervisor.start(
            "web",
            [
                sys.executable,
                "manage.py",
                "runserver",
                "--noreload",
                f"127.0.0.1:{self.options.port}",
            ],
        )
        self.wait_for_web()

    def start_worker(self) -> Child:
        # No gossip, mingle or broker heartbeat: the demo has one worker, and fewer broker
        # conversations mean fewer ways to trip over a vanished Redis.
        return self.supervisor.start(
            "celery-worker",
            [sys.executable, "-m", "celery", "-A", "example_project", "worker", "-l", "info",
             "--concurrency", "2", "-n", "demo-worker@%h",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
        )  # fmt: skip

    def start_db_worker(self, name: str) -> Child:
        # Every queue; an idle worker looks for work every 0.2 s (the default is 1 s).
        return self.supervisor.start(
            name,
            [sys.executable, "manage.py", "db_worker", "--queue-name", "*", "--interval", "0.2",
             "--worker-id", name, "--no-reload"],
        )  # fmt: skip

    def add_node(self) -> Child:
        name = node_name(self.nodes_started)
        self.nodes_started += 1
        return self.supervisor.start(
            name,
            [sys.executable, "manage.py", "run_scheduler", "--node-id", name,
             "--lease-ttl", f"{self.options.lease_ttl:g}",
             "--poll-interval", f"{self.options.poll_interval:g}"],
        )  # fmt: skip

    def start_redis(self) -> None:
        assert self.options.own_redis_port is not None
        child = self.supervisor.start(
            "redis",
            [sys.executable, str(ROOT / "scripts" / "devredis.py"), "serve",
             "--port", str(self.options.own_redis_port)],
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while not self.redis_answers():
            if not child.alive:
                raise DemoError(f"the demo's Redis exited:\n{tail(child.log)}")
            if time.monotonic() > deadline:
                raise DemoError(f"the demo's Redis did not answer within 20 s; see {child.log}")
            time.sleep(0.1)
        self.redis_stopped_at = None

    def stop_redis(self) -> None:
        self.supervisor.stop("redis")
        self.redis_stopped_at = time.monotonic()

    def redis_answers(self) -> bool:
        try:
            client = redis.Redis.from_url(
                self.redis_url, socket_connect_timeout=1, socket_timeout=1
            )
            with contextlib.closing(client):
                return bool(client.ping())
        except redis.RedisError:
            return False

    def wait_for_web(self, timeout: float = 60.0) -> None:
        url = f"http://127.0.0.1:{self.options.port}/demo/ping/"
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(url, timeout=1):
                    return
            except OSError:
                pass
            for child in self.supervisor.children.values():
                if not child.alive:
                    raise DemoError(f"{child.name} exited during startup:\n{tail(child.log)}")
            if time.monotonic() > deadline:
                raise DemoError(f"the dev server did not answer {url} within {timeout:g} s")
            time.sleep(0.3)

    def close(self) -> None:
        self.supervisor.stop_all()

    # -- actions (keys and the scripted story) ---------------------------------------------

    def scheduler_count(self) -> int:
        """How many of the demo's schedulers are running."""
        names = {node_name(i) for i in range(self.nodes_started)}
        return sum(1 for c in self.supervisor.children.values() if c.alive and c.name in names)

    def leader(self, snap: Snapshot) -> Child | None:
        child = self.supervisor.children.get(snap.leader or "")
        return child if child is not None and child.alive else None

    def stop_leader(self, snap: Snapshot, signum: signal.Signals) -> str:
        """SIGKILL or SIGTERM the leader and start a new node, so two are always running."""
        child = self.leader(snap)
        if child is None:
            reason = "Redis is down" if snap.redis_error else "the lease is free right now"
            return f"no leader to stop: {reason}; wait for one (★ in the nodes table)"
        how = "killed (SIGKILL)" if signum == signal.SIGKILL else "stopped (SIGTERM)"
        self.supervisor.signal(child.name, signum, how)
        if signum == signal.SIGKILL:
            # The lease stays in Redis until its TTL runs out: that wait is the failover time.
            what = f"{child.name} {how}: its lease expires within {self.options.lease_ttl:g} s"
        else:
            what = f"{child.name} {how}: it releases the lease at once"
        self.narrator.action(timezone.now(), what, f"the {signum.name} of {child.name}")
        new = self.add_node()
        kept = "three" if self.nodes_kept == 3 else "two"
        self.narrator.say(timezone.now(), f"started {new.name} so {kept} nodes keep running", "dim")
        return ""

    def toggle_redis(self) -> str:
        if self.without_redis:
            return "r does nothing here: this demo runs without Redis (Django's tasks, database)"
        if not self.owns_redis:
            return (
                "r does nothing here: Redis comes from REDIS_URL, and the demo never stops a "
                "Redis it did not start (run without REDIS_URL for a throwaway one)"
            )
        if self.redis_stopped_at is None:
            self.stop_redis()
            self.narrator.action(
                timezone.now(), "Redis stopped (press r to start it again)", "Redis stopped"
            )
        else:
            self.start_redis()
            self.narrator.action(
                timezone.now(),
                "Redis started again, empty: the nodes notice at their next retry (they back "
                "off up to 10 s while it is down) and one takes a new lease",
                "Redis came back",
            )
        return ""

    # -- reading -----------------------------------------------------------------------------

    def observe(self) -> Snapshot:
        snap = snapshot.read(self.started_at)
        for child in self.supervisor.died():
            self.on_exit(child, snap)
        self.narrator.observe(snap)
        return snap

    def on_exit(self, child: Child, snap: Snapshot) -> None:
        """A child exited without the demo asking: restart the worker once it is, else report."""
        redis_down = self.redis_stopped_at is not None or bool(snap.redis_error)
        if child.name == "celery-worker" and redis_down and self.worker_restarts < 5:
            # Celery 5.7's Redis transport can crash the worker when the broker vanishes while it
            # holds unacknowledged messages (acks_late). Production runs workers under a
            # supervisor (systemd, Kubernetes) that restarts them; the demo plays that part.
            self.worker_restarts += 1
            self.start_worker()
            self.narrator.say(
                snap.now,
                f"celery-worker exited when the broker (Redis) vanished ({child.state()}); "
                "restarted it, as systemd or Kubernetes would. Its unfinished runs are re-sent "
                "by the leader (outbox) or declared lost after RUN_LOST_AFTER.",
                "yellow",
            )
            return
        self.failures.append(f"{child.name} exited on its own ({child.state()})\n{tail(child.log)}")
        self.narrator.say(
            snap.now, f"{child.name} exited on its own ({child.state()}); log: {child.log}", "red"
        )

    def scene(self) -> Scene:
        children = self.supervisor.children
        nodes = [
            (c.name, c.pid, c.state()) for c in children.values() if c.name.startswith("demo-")
        ]
        alive = [n for n in nodes if n[2] == "running"]
        dead = [n for n in nodes if n[2] != "running"][-2:]
        services = []
        for name in SERVICES:
            child = children.get(name)
            if child is not None:
                state = f"running (pid {child.pid})" if child.alive else child.state()
                services.append((name, state))
        if self.without_redis:
            redis_label = "none: django.tasks on django-tasks-db's db_worker, the database lease"
        else:
            if not self.owns_redis:
                services.append(("redis", "given by REDIS_URL"))
            redis_label = redact(self.redis_url) + (
                " (throwaway, the demo's own)" if self.owns_redis else " (REDIS_URL)"
            )
        return Scene(
            admin_url=f"http://127.0.0.1:{self.options.port}/admin/",
            login=self.options.login,
            database=database_label(),
            redis=redis_label,
            lease_ttl=self.options.lease_ttl,
            lease=self.lease_backend,
            log_dir=str(self.log_dir),
            nodes=[n for n in nodes if n in alive or n in dead],
            services=services,
            notice=self.notice,
        )


def database_label() -> str:
    database = settings.DATABASES["default"]
    name = str(database.get("NAME"))
    if database["ENGINE"].endswith("sqlite3"):
        return f"SQLite {name.removeprefix(str(ROOT) + os.sep)}"
    return (
        f"{database['ENGINE'].rsplit('.', 1)[-1]} {name} on {database.get('HOST') or 'localhost'}"
    )


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP end the demo like Ctrl-C does: through the cleanup below."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
