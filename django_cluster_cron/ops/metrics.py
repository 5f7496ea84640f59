"""Prometheus metrics, through the official client (the optional extra ``metrics``).

Names follow Prometheus conventions (``cluster_cron_*``, counters ``*_total``, durations in
``*_seconds``); docs/reference/metrics.md lists them. Everything here is a no-op when
``prometheus_client`` is not installed or ``CLUSTER_CRON["METRICS"]`` is False, so the scheduler
and the worker call it unconditionally.

Where the numbers come out:

* ``run_scheduler --metrics-port N`` serves ``/metrics`` from the scheduler process.
* A Celery worker serves them when ``CLUSTER_CRON["WORKER_METRICS_PORT"]`` is set. Celery's
  prefork pool runs tasks in child processes, so the worker uses prometheus_client's
  multiprocess mode: each process writes its values to files in ``PROMETHEUS_MULTIPROC_DIR``
  (set it yourself, or the worker makes a fresh directory before the pool starts) and the main
  process's ``/metrics`` adds them up; a child that exits is marked dead for the live gauges.

Each serves its own role's metrics only (:class:`Metrics` registers a role's metrics when the
process first touches one). This app imports prometheus_client only when a metric is first
touched (or an exporter starts), after the worker has chosen the multiprocess directory: the
client picks its value store at import, and when another package imported it earlier the worker
switches the store before making its metrics (:func:`prepare_worker_directory`).
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import logging
import os
import tempfile
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs

from ..conf import app_settings
from . import httpserve
from .metric_roles import (
    CLAIM_BUCKETS,
    DURATION_BUCKETS,
    JOB_LABEL,
    LATENCY_BUCKETS,
    OTHER_JOBS,
    SchedulerMetrics,
    SlotMetrics,
    WorkerMetrics,
)

logger = logging.getLogger("django_cluster_cron.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@functools.cache
def installed() -> bool:
    """Whether prometheus_client can be imported (found without importing it: importing picks
    the client's value store, which must wait for the worker's multiprocess directory). Looked
    up once per process."""
    return importlib.util.find_spec("prometheus_client") is not None


def enabled() -> bool:
    return bool(app_settings.METRICS) and installed()


# The buckets, the job label and the roles' metrics are in .metric_roles; their names are
# read from here too.
__all__ = [
    "CLAIM_BUCKETS",
    "DURATION_BUCKETS",
    "JOB_LABEL",
    "LATENCY_BUCKETS",
    "NULL",
    "OTHER_JOBS",
    "SchedulerMetrics",
    "SlotMetrics",
    "WorkerMetrics",
    "enabled",
    "get",
    "installed",
    "registry",
    "serve",
]

# Labels a target's own series must not use (Prometheus's target labels).
RESERVED_LABELS = frozenset({"job", "instance"})


class _Null:
    """Stands in for a metric when metrics are off: every call does nothing."""

    def __getattr__(self, name: str) -> Any:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> _Null:
        return self


NULL: Any = _Null()


def _members(role: type) -> tuple[str, ...]:
    """The names a role's metrics are read by: its metrics and its public methods."""
    methods = [name for name, value in vars(role).items() if callable(value) and name[0] != "_"]
    return (*role.__annotations__, *methods)


ROLE_MEMBERS = {role: _members(role) for role in (SchedulerMetrics, WorkerMetrics, SlotMetrics)}
ROLE_OF = {name: role for role, names in ROLE_MEMBERS.items() for name in names}


class Metrics:
    """Every metric this app exports, in the default registry, made one role at a time: the
    scheduler's the first time the process reads one of them, the worker's likewise. A process
    registers what its role touches, so a scheduler's /metrics lists no worker series and a
    worker's no scheduler series (each would read as zeros of something that never runs
    there). Read a metric as an attribute (``get().ticks``); the first read of a role registers
    all of its metrics at once, so its counters are exported from zero."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        role = ROLE_OF.get(name)
        if role is None:
            raise AttributeError(f"no metric or method {name!r}")
        with self._lock:
            if name not in self.__dict__:
                try:
                    made = role()
                except Exception:  # never let metrics break scheduling or a run
                    logger.exception("metrics.unavailable role=%s", role.__name__)
                    made = NULL
                for member in ROLE_MEMBERS[role]:
                    self.__dict__[member] = getattr(made, member)
        return self.__dict__[name]


@functools.cache
def _metrics() -> Metrics:
    return Metrics()


def get() -> Any:
    """The metrics of this process, or a stand-in that ignores every call."""
    if not enabled():
        return NULL
    try:
        return _metrics()
    except Exception:  # never let metrics break scheduling or a run
        logger.exception("metrics.unavailable")
        return NULL


def count_paused_slots(sender: Any, job: Any, slots_not_run: int = 0, **extra: Any) -> None:
    """``job_resumed``: the slots that fell while the job was paused did not run."""
    get().not_run(job.name, "paused", slots_not_run)


def observe_each(histogram: Any, values: Iterable[float]) -> None:
    for value in values:
        histogram.observe(value)


# -- exporters ----------------------------------------------------------------------------------


def registry() -> Any:
    """What ``/metrics`` serves: every process's values in multiprocess mode, else this one's."""
    from prometheus_client import REGISTRY, CollectorRegistry, multiprocess

    if os.environ.get(MULTIPROC_ENV):
        collected = CollectorRegistry()
        multiprocess.MultiProcessCollector(collected)  # type: ignore[no-untyped-call]
        return collected
    return REGISTRY


def serve(port: int, host: str = "0.0.0.0") -> int:
    """Serve ``/metrics`` on a thread; return the port (``0`` picks a free one).

    At most :data:`~.httpserve.MAX_CONNECTIONS` connections at once, each dropped after
    :data:`~.httpserve.TIMEOUT` seconds of silence: see :mod:`.httpserve`."""
    if not installed():
        raise RuntimeError(
            "metrics need prometheus_client: pip install 'django-cluster-cron[metrics]'"
        )
    server = httpserve.BoundedHTTPServer(
        (host, port), scrape_handler(registry()), name="metrics", logger=logger
    )
    server.start()
    listening.append((host, server.port))
    log_listening()
    return server.port


def scrape_handler(source: Any) -> type[httpserve.Handler]:
    """Answers a scrape of ``source`` as prometheus_client's own exporter does: the format the
    ``Accept`` header asks for, gzip when accepted, ``name[]`` to pick families."""
    from prometheus_client.exposition import choose_encoder, gzip_accepted

    class MetricsHandler(httpserve.Handler):
        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            if path not in ("/", "/metrics"):
                self.send_error(404, "try /metrics")
                return
            names = parse_qs(query).get("name[]")
            collected = source.restricted_registry(names) if names else source
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            body = encoder(collected)
            headers = []
            if gzip_accepted(self.headers.get("Accept-Encoding", "")):
                body = gzip.compress(body)
                headers.append(("Content-Encoding", "gzip"))
            self.send_body(200, content_type, body, headers)

    return MetricsHandler


# Where this process serves /metrics (host, port): a Celery worker says it again once Celery has
# set up logging (its server starts before that, so the first line may go nowhere).
listening: list[tuple[str, int]] = []


def log_listening() -> None:
    for host, port in listening:
        logger.info("metrics.listening port=%s host=%s path=/metrics", port, host)


def prepare_worker_directory() -> str | None:
    """Before a worker's pool starts: make sure multiprocess mode has a directory, and that the
    client keeps this app's values there.

    A directory given in the environment is kept across restarts on purpose: counters carry on
    (Prometheus handles either), and ``cluster_cron_last_success_timestamp_seconds`` — the
    dead-man's switch — survives a worker restart. The workers set no live gauges, the one kind a
    dead process's files would distort.

    prometheus_client picks its value store when it is first imported. When something imported
    it before the directory was set (Flower's Celery plugin does, as the ``celery`` command loads
    it), it picked the in-memory store, which the main process's /metrics never reads: the store
    is switched here, before any metric of this app is made, so the pool processes write theirs
    to the directory.
    """
    if not installed():
        return None
    directory = os.environ.get(MULTIPROC_ENV)
    if not directory:
        directory = tempfile.mkdtemp(prefix="cluster-cron-metrics-")
        os.environ[MULTIPROC_ENV] = directory
    from prometheus_client import values

    if not getattr(values.ValueClass, "_multiprocess", False):
        values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
        logger.info(
            "metrics.multiprocess_store: prometheus_client was imported before %s was set; "
            "this app's metrics are kept in %s from now on",
            MULTIPROC_ENV,
            directory,
        )
    if _metrics.cache_info().currsize and {*ROLE_OF} & vars(_metrics()).keys():
        logger.warning(
            "metrics.made_early: this process made metrics before its pool started, so their "
            "values are not exported; set %s in the worker's environment",
            MULTIPROC_ENV,
        )
    return directory


def mark_process_dead(pid: int) -> None:
    if os.environ.get(MULTIPROC_ENV) and installed():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
