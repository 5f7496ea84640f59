"""Process and observation helpers for the latency and failover benchmarks.

- start/stop the schedulers under test as real processes: ours (`run_scheduler`) and the peers'
  `celery beat` with django-celery-beat's DatabaseScheduler or celery-redbeat (app: _peerapp.py);
- :class:`BrokerWatch`, an observer independent of every scheduler: it pops each message off
  the broker's queue list in the throwaway Redis and stamps its arrival (wall clock, the same
  clock as the fire times it is compared with);
- small statistics and the JSON interface shared by the workload scripts.

Children get PR_SET_PDEATHSIG, so a killed harness leaves no scheduler behind.
"""

from __future__ import annotations

import atexit
import base64
import ctypes
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATABASE_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
REDBEAT_SCHEDULER = "redbeat.RedBeatScheduler"
# kombu's Redis transport keeps a queue as a list; priorities 3/6/9 get their own keys.
QUEUE_KEYS = ["celery"] + [f"celery\x06\x16{p}" for p in (3, 6, 9)]

_children: list[subprocess.Popen[bytes]] = []
_log_dir: list[Path] = []


def log_dir() -> Path:
    """Where the children's output goes (made on first use; printed by the scripts)."""
    if not _log_dir:
        _log_dir.append(Path(tempfile.mkdtemp(prefix="dcc-bench-logs-")))
    return _log_dir[0]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def spawn(
    cmd: list[str], env: dict[str, str], name: str, cwd: Path = ROOT
) -> subprocess.Popen[bytes]:
    log = open(log_dir() / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
    )
    log.close()
    _children.append(proc)
    return proc


def start_ours(
    env: dict[str, str],
    node: str,
    ttl: float | None = None,
    poll: float | None = None,
    settings: dict[str, Any] | None = None,
    code: Path = ROOT,
) -> subprocess.Popen[bytes]:
    """``run_scheduler`` from the checkout ``code`` (WARNING log), shipped defaults unless
    ``settings`` says."""
    cmd = [sys.executable, "-m", "django", "run_scheduler", "--node-id", node]
    cmd += ["--log-level", "WARNING"]
    if ttl is not None:
        cmd += ["--lease-ttl", str(ttl)]
    if poll is not None:
        cmd += ["--poll-interval", str(poll)]
    child_env = dict(env, TEST_CLUSTER_CRON=json.dumps(settings or {}))
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code), env.get("PYTHONPATH")]))
    return spawn(cmd, child_env, node, cwd=code)


def start_worker(
    env: dict[str, str], name: str, concurrency: int, code: Path = ROOT
) -> subprocess.Popen[bytes]:
    """The test app's Celery worker as a worker usually runs (prefork, INFO log), from the
    checkout ``code``; returns once it is ready to consume."""
    child = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(code), env.get("PYTHONPATH")])))
    child.setdefault("TEST_CLUSTER_CRON", "{}")
    cmd = [sys.executable, "-m", "celery", "-A", "tests.testapp.celery:app", "worker"]
    cmd += ["--pool=prefork", f"--concurrency={concurrency}", "--loglevel=INFO"]
    cmd += ["--without-gossip", "--without-mingle", "--without-heartbeat", f"--hostname={name}@%h"]
    proc = spawn(cmd, child, name, cwd=code)
    log = log_dir() / f"{name}.log"
    wait_until(lambda: "ready." in log.read_text(errors="replace"), 120, f"worker {name}")
    return proc


def wait_until(predicate: Any, timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something true; exit the benchmark after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def start_beat(
    env: dict[str, str], scheduler: str, name: str, conf: dict[str, Any] | None = None
) -> subprocess.Popen[bytes]:
    """`celery beat` with the given scheduler class, shipped defaults unless ``conf`` says."""
    schedule_file = log_dir() / f"{name}.schedule"  # unused by both peers, but beat wants a path
    cmd = [sys.executable, "-m", "celery", "-A", "_peerapp", "beat", "-S", scheduler]
    cmd += ["--loglevel", "INFO", "--pidfile=", "-s", str(schedule_file)]
    path = os.pathsep.join(filter(None, [str(BENCH), env.get("PYTHONPATH")]))
    child_env = dict(env, PYTHONPATH=path, BENCH_CELERY_CONF=json.dumps(conf or {}))
    return spawn(cmd, child_env, name)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@atexit.register
def stop_all() -> None:
    for proc in _children:
        stop(proc, signal.SIGKILL, 10)
    _children.clear()


def flush_broker(url: str) -> None:
    """Empty the benchmark's own throwaway Redis (never a shared server)."""
    client = redis.Redis.from_url(url)
    port = client.connection_pool.connection_kwargs.get("port")
    if port == 6379:
        raise SystemExit(f"refusing to flush {url}: the shared Redis, not a throwaway one")
    client.flushdb()
    client.close()


def clean(url: str) -> None:
    """Empty every table the benchmarks fill (ours and django-celery-beat's) and the broker."""
    from django.db import connection
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    from django_cluster_cron.models import JobDefinition, JobRun

    with connection.cursor() as cursor:  # raw: the ORM would load 100,000 rows to delete them
        for model in (JobRun, JobDefinition, PeriodicTask, CrontabSchedule):
            cursor.execute(f"DELETE FROM {model._meta.db_table}")
    flush_broker(url)


@dataclass
class Arrival:
    at: float  # time.time() when the observer popped it
    task: str
    args: list[Any]
    headers: dict[str, Any]


def parse(at: float, raw: bytes) -> Arrival:
    message = json.loads(raw)
    headers = message.get("headers") or {}
    body = message["body"]
    if message.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    decoded = json.loads(body)
    args = decoded[0] if isinstance(decoded, list) else decoded.get("args", [])
    return Arrival(at, headers.get("task", ""), list(args), headers)


@dataclass
class BrokerWatch:
    """Pops every message off the queue lists as it lands and stamps it; run as a thread."""

    url: str
    raw: list[tuple[float, bytes]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> BrokerWatch:
        self._thread = threading.Thread(target=self._run, name="broker-watch", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        client = redis.Redis.from_url(self.url)
        try:
            while not self._stop.is_set():
                popped = client.brpop(QUEUE_KEYS, timeout=0.2)
                if popped is None:
                    continue
                self.raw.append((time.time(), popped[1]))
                # A burst: drain what is already there in large pops, stamping each pop.
                for key in QUEUE_KEYS:
                    while batch := client.rpop(key, 1000):
                        now = time.time()
                        self.raw.extend((now, item) for item in batch)
        except redis.ConnectionError:
            if not self._stop.is_set():
                raise
        finally:
            client.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def count(self) -> int:
        return len(self.raw)

    def arrivals(self, since: int = 0) -> list[Arrival]:
        return [parse(at, raw) for at, raw in self.raw[since:]]

    def wait_for(self, predicate: Any, timeout: float, since: int = 0) -> Arrival | None:
        """The first arrival (from index ``since``) matching ``predicate``, or None on timeout."""
        deadline = time.monotonic() + timeout
        seen = since
        while True:
            upto = len(self.raw)
            for at, raw in self.raw[seen:upto]:
                arrival = parse(at, raw)
                if predicate(arrival):
                    return arrival
            seen = upto
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)


# --- statistics and the JSON interface -------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: list[float]) -> dict[str, float | int]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "reps": len(values),
    }


def row(
    system: str,
    variant: str,
    n: int | None,
    metric: str,
    unit: str,
    values: list[float],
    note: str = "",
) -> dict[str, Any]:
    head = {"system": system, "variant": variant, "n": n, "metric": metric, "unit": unit}
    return head | summary(values) | {"note": note}


def write_json(path: str | None, document: dict[str, Any]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {path}")


def fmt(value: float, unit: str) -> str:
    return f"{value:.3f} {unit}" if unit in ("s", "ms") else f"{value:g} {unit}"
