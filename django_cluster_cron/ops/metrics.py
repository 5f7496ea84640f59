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

logger = logging.getLogger("django_cluster_cron.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
CLAIM_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)
OTHER_JOBS = "_other"


@functools.cache
def installed() -> bool:
    """Whether prometheus_client can be imported (found without importing it: importing picks
    the client's value store, which must wait for the worker's multiprocess directory). Looked
    up once per process."""
    return importlib.util.find_spec("prometheus_client") is not None


def enabled() -> bool:
    return bool(app_settings.METRICS) and installed()


# The label naming a job. Not ``job``: Prometheus sets ``job`` (and ``instance``) on every series
# it scrapes, and under its default ``honor_labels: false`` renames a clashing label of ours to
# ``exported_job`` — alert rules and dashboards written against ``job`` would never match.
JOB_LABEL = "job_name"
# Labels a target's own series must not use (Prometheus's target labels).
RESERVED_LABELS = frozenset({"job", "instance"})


class _Null:
    """Stands in for a metric when metrics are off: every call does nothing."""

    def __getattr__(self, name: str) -> Any:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> _Null:
        return self


NULL: Any = _Null()


class SchedulerMetrics:
    """What a scheduler node exports: each attribute named here is a metric."""

    leader: Any
    lease_epoch: Any
    lease_renewals: Any
    lease_lost: Any
    went_back: Any
    uncertain: Any
    ticks: Any
    slots: Any
    publish_latency: Any
    publish_failures: Any
    republished: Any
    runs_lost: Any
    oldest_pending: Any
    armed: Any
    clock_offset: Any

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.leader = Gauge(
            "cluster_cron_leader",
            "1 while this scheduler node leads, 0 while it stands by.",
            ["node"],
            multiprocess_mode="liveall",
        )
        self.lease_epoch = Gauge(
            "cluster_cron_lease_epoch",
            "The fencing epoch this node leads with (0 while standing by).",
            multiprocess_mode="livemax",
        )
        self.lease_renewals = Counter(
            "cluster_cron_lease_renewals",
            "Lease renewals by the leader, by result: ok, lost (taken or expired), failed "
            "(backend unreachable).",
            ["result"],
        )
        self.lease_lost = Counter(
            "cluster_cron_lease_lost",
            "Leases a leader found no longer its own at a renewal, by reason: taken (another "
            "node holds it) or gone (expired, or lost when its store failed over).",
            ["reason"],
        )
        self.went_back = Counter(
            "cluster_cron_leader_row_went_back",
            "Terms that found the leader row behind what their node had seen, by cause: "
            "writes_lost (the database lost acknowledged writes: a lossy failover, a restore) or "
            "epoch_edited (only the epoch went back).",
            ["cause"],
        )
        self.uncertain = Counter(
            "cluster_cron_uncertain_slots",
            "Slots and runs whose fate the database lost, by the job's decision: skip (recorded "
            "uncertain, not run) or run (run again: it may have run before).",
            ["decision"],
        )
        self.ticks = Counter("cluster_cron_ticks", "Passes of the scheduler loop.")
        self.slots = Counter(
            "cluster_cron_slots",
            "Slots the leader decided, by outcome: schedule and catchup (recorded to run, due now "
            "or ahead of their time), missed, skipped.",
            ["outcome"],
        )
        self.publish_latency = Histogram(
            "cluster_cron_publish_latency_seconds",
            "From an on-time slot's fire time until its message was first in the broker.",
            buckets=LATENCY_BUCKETS,
        )
        self.publish_failures = Counter(
            "cluster_cron_publish_failures",
            "Messages the broker did not take (they stay pending for the outbox).",
        )
        self.republished = Counter(
            "cluster_cron_outbox_republished",
            "Runs the outbox sent again because no worker had started them.",
        )
        self.runs_lost = Counter(
            "cluster_cron_runs_lost",
            "Running runs whose worker stopped beating, by whether they were retried.",
            ["retried"],
        )
        self.oldest_pending = Gauge(
            "cluster_cron_oldest_pending_run_age_seconds",
            "Age of the oldest run recorded but not yet taken by a worker (0 if none).",
            multiprocess_mode="livemax",
        )
        self.armed = Gauge(
            "cluster_cron_runs_recorded_ahead",
            "Runs the leader recorded ahead of their time and holds prepared for their instant.",
            multiprocess_mode="livemax",
        )
        self.clock_offset = Gauge(
            "cluster_cron_clock_offset_seconds",
            "This host's clock minus the database server's, as the scheduler last measured it.",
            ["node"],
            multiprocess_mode="liveall",
        )


class WorkerMetrics:
    """What a worker exports, from the processes that run the bodies: each attribute named here
    is a metric; the methods look up the series a run touches."""

    runs: Any
    duplicates: Any
    run_duration: Any
    last_success: Any
    claim: Any

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.runs = Counter(
            "cluster_cron_runs",
            "Runs by what happened on the worker: claimed, succeeded, failed, retried, skipped, "
            "cancelled, expired, missed.",
            ["outcome"],
        )
        self.duplicates = Counter(
            "cluster_cron_duplicate_deliveries",
            "Deliveries of a run that lost the claim (a second copy of a message): dropped.",
        )
        self.run_duration = Histogram(
            "cluster_cron_run_duration_seconds",
            "How long job bodies ran, by job (at most METRICS_JOB_LABEL_LIMIT names per process, "
            f"the rest as {OTHER_JOBS!r}).",
            [JOB_LABEL],
            buckets=DURATION_BUCKETS,
        )
        self.last_success = Gauge(
            "cluster_cron_last_success_timestamp_seconds",
            "When a run of the job last succeeded (database time, Unix seconds): the dead-man's "
            "switch alerts compare it with time().",
            [JOB_LABEL],
            multiprocess_mode="max",
        )
        self.claim = Histogram(
            "cluster_cron_claim_seconds",
            "The worker's own cost per run: the claim before the body.",
            buckets=CLAIM_BUCKETS,
        )
        self._jobs: set[str] = set()
        self._jobs_lock = threading.Lock()
        # Labelled series a worker touches for every run, looked up once (labels() takes a lock
        # and builds a key each time).
        self._outcomes: dict[str, Any] = {}
        self._finished: dict[str, tuple[Any, Any]] = {}

    def job_label(self, name: str) -> str:
        """The job's name while few names have been seen here; past the cap, one bucket."""
        limit = app_settings.METRICS_JOB_LABEL_LIMIT
        if limit == 0:
            return OTHER_JOBS
        if name in self._jobs:
            return name
        with self._jobs_lock:
            if name in self._jobs or len(self._jobs) < limit:
                self._jobs.add(name)
                return name
        return OTHER_JOBS

    def run_outcome(self, outcome: str) -> Any:
        """``runs{outcome=...}``, the series for one outcome."""
        found = self._outcomes.get(outcome)
        if found is None:
            found = self._outcomes[outcome] = self.runs.labels(outcome=outcome)
        return found

    def job_finished(self, label: str) -> tuple[Any, Any]:
        """The duration histogram and the last-success gauge of one job label."""
        found = self._finished.get(label)
        if found is None:
            found = (
                self.run_duration.labels(job_name=label),
                self.last_success.labels(job_name=label),
            )
            self._finished[label] = found
        return found


def _members(role: type) -> tuple[str, ...]:
    """The names a role's metrics are read by: its metrics and its public methods."""
    methods = [name for name, value in vars(role).items() if callable(value) and name[0] != "_"]
    return (*role.__annotations__, *methods)


ROLE_MEMBERS = {role: _members(role) for role in (SchedulerMetrics, WorkerMetrics)}
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
