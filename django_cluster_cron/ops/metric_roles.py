"""The metrics each role of process exports: a scheduler node's (:class:`SchedulerMetrics`)
and a worker's (:class:`WorkerMetrics`), with their buckets and the label naming a job.
:mod:`.metrics` registers a role's metrics when a process first touches one and serves them."""

from __future__ import annotations

import threading
from typing import Any

from ..conf import app_settings

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
CLAIM_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)
OTHER_JOBS = "_other"

# The label naming a job. Not ``job``: Prometheus sets ``job`` (and ``instance``) on every series
# it scrapes, and under its default ``honor_labels: false`` renames a clashing label of ours to
# ``exported_job`` — alert rules and dashboards written against ``job`` would never match.
JOB_LABEL = "job_name"


def capped(name: str, seen: set[str], lock: threading.Lock) -> str:
    """A job's label: its name while fewer than ``METRICS_JOB_LABEL_LIMIT`` names were ``seen``
    by this process's metric; past the cap, one bucket (``_other``)."""
    limit = app_settings.METRICS_JOB_LABEL_LIMIT
    if limit == 0:
        return OTHER_JOBS
    if name in seen:
        return name
    with lock:
        if name in seen or len(seen) < limit:
            seen.add(name)
            return name
    return OTHER_JOBS


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
    runs_pruned: Any
    prunable_age: Any
    prunable_retention: Any

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
        self.runs_pruned = Counter(
            "cluster_cron_runs_pruned",
            "Finished runs the leader's pruning deleted (past their retention), by status.",
            ["status"],
        )
        self.prunable_age = Gauge(
            "cluster_cron_prunable_oldest_age_seconds",
            "Age of the slot of the oldest run past its retention still in the ledger (0 if "
            "none), as the leader's last pruning pass found it.",
            multiprocess_mode="livemax",
        )
        self.prunable_retention = Gauge(
            "cluster_cron_prunable_oldest_retention_seconds",
            "The retention of that oldest prunable run's status (0 if none): pruning is behind "
            "when the age passes twice it.",
            multiprocess_mode="livemax",
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
        return capped(name, self._jobs, self._jobs_lock)

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


# Why a slot did not run (the ``reason`` of cluster_cron_slots_not_run_total).
NOT_RUN_REASONS = ("overlap", "buffer_full", "catchup_window", "paused", "excluded", "cancelled")


class SlotMetrics:
    """What every process that decides a slot's fate exports: which job's slots did not run,
    and why (the leader recording them, a worker refusing or stopping one, an operator's
    cancel), and the runs each job holds back (set by the leader)."""

    slots_not_run: Any
    buffered: Any
    pieces: Any
    pieces_in_flight: Any

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge

        self.slots_not_run = Counter(
            "cluster_cron_slots_not_run",
            "Slots that did not run, by job and reason: overlap (the overlap policy skipped it, "
            "or a newer slot superseded it), buffer_full (buffer_all's max_buffered), "
            "catchup_window (missed: too late for the catch-up policy or window), paused (its job "
            "was paused), excluded (an exclusion rule), cancelled (an operator or cancel_other).",
            [JOB_LABEL, "reason"],
        )
        self.buffered = Gauge(
            "cluster_cron_buffered_runs",
            "Runs each job holds back behind its running one (overlap buffer_all, cancel_other, "
            "terminate_other), as the leader last counted them.",
            [JOB_LABEL],
            multiprocess_mode="livemax",
        )
        self.pieces = Counter(
            "cluster_cron_pieces",
            "Pieces of runs split into pieces, by job and outcome: succeeded, failed (for good), "
            "retried (an attempt failed, the next is sent), cancelled, lost (its worker went "
            "silent; the leader retried or failed it).",
            [JOB_LABEL, "outcome"],
        )
        self.pieces_in_flight = Gauge(
            "cluster_cron_pieces_in_flight",
            "Pieces each job has sent and not ended (queued, running or retrying), as the "
            "leader last counted them.",
            [JOB_LABEL],
            multiprocess_mode="livemax",
        )
        self._jobs: set[str] = set()
        self._jobs_lock = threading.Lock()
        self._depths_seen: set[str] = set()
        self._flying_seen: set[str] = set()

    def not_run(self, job_name: str, reason: str, count: int = 1) -> None:
        """Count ``count`` slots of the job that did not run, for ``reason``."""
        if count > 0:
            label = capped(job_name, self._jobs, self._jobs_lock)
            self.slots_not_run.labels(job_name=label, reason=reason).inc(count)

    def piece_outcome(self, job_name: str, outcome: str, count: int = 1) -> None:
        """Count ``count`` pieces of the job that ended (or went again) so."""
        if count > 0:
            label = capped(job_name, self._jobs, self._jobs_lock)
            self.pieces.labels(job_name=label, outcome=outcome).inc(count)

    def pieces_flying(self, flying: dict[str, int]) -> None:
        """Set each job's pieces in flight; jobs that had some and have none now go to 0."""
        for name in {*self._flying_seen, *flying}:
            label = capped(name, self._jobs, self._jobs_lock)
            self.pieces_in_flight.labels(job_name=label).set(flying.get(name, 0))
        self._flying_seen = set(flying)

    def buffer_depths(self, depths: dict[str, int]) -> None:
        """Set each job's buffer depth; jobs that held runs back before and hold none now
        go to 0."""
        for name in {*self._depths_seen, *depths}:
            label = capped(name, self._jobs, self._jobs_lock)
            self.buffered.labels(job_name=label).set(depths.get(name, 0))
        self._depths_seen = set(depths)
