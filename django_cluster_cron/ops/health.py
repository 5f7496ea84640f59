"""Is the cluster healthy? Checks with a status and a reason each, for probes and alerts.

Used by ``manage.py cluster_health`` (exit 0 healthy, 1 not) and the JSON health view
(:mod:`django_cluster_cron.ops.views`, HTTP 503 when not healthy). Every check reads either what
the cluster page already reads (the leader row, the lease backend's holder and node reports) or
a bounded slice of the ledger through an index — never every run: the ledger can hold millions
of rows. The broker's check reads the live jobs' task names (one query), since only a Celery
task's runs go through the broker. Times are the database's.

A check is ``ok``, ``warn`` (worth a look, not an outage) or ``fail`` (the cluster is not doing
its job); the cluster is healthy when no check fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import DatabaseError
from django.utils import timezone

from ..conf import app_settings
from ..dbtime import as_utc, database_now
from ..models import EXECUTING_STATUSES, JobDefinition, JobRun
from .status import ClusterStatus, cluster_status

OK, WARN, FAIL = "ok", "warn", "fail"

# The on-time target (bench/README.md): a slot published within a second of its fire time.
LAG_WARN = 1.0


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    reason: str
    value: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "value": self.value,
        }


@dataclass
class HealthReport:
    checked_at: datetime
    checks: list[Check] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return all(check.status != FAIL for check in self.checks)

    @property
    def status(self) -> str:
        statuses = {check.status for check in self.checks}
        return FAIL if FAIL in statuses else WARN if WARN in statuses else OK

    def as_dict(self, *, details: bool = True) -> dict[str, Any]:
        """The report; without ``details`` each check's name and status only (no reasons or
        values: they name hosts, processes, epochs and errors)."""
        checks = [
            check.as_dict() if details else {"name": check.name, "status": check.status}
            for check in self.checks
        ]
        return {
            "healthy": self.healthy,
            "status": self.status,
            "checked_at": self.checked_at.isoformat(),
            "checks": checks,
        }

    def lines(self) -> list[str]:
        return [f"{c.status:<4} {c.name}: {c.reason}" for c in self.checks]


def cluster_health(*, broker: bool = True, now: datetime | None = None) -> HealthReport:
    """Run every check (``broker=False`` skips the Celery broker's, and its query of the live
    jobs' tasks)."""
    try:
        now = now or database_now()
        status = cluster_status(now, runs=False)
    except DatabaseError as exc:  # nothing else can be judged without the database
        report = HealthReport(checked_at=timezone.now())
        report.checks.append(Check("database", FAIL, f"unreachable: {type(exc).__name__}: {exc}"))
        return report
    report = HealthReport(checked_at=now)
    report.checks.append(Check("database", OK, "reachable"))
    checks: list[tuple[str, Callable[[], Check]]] = [
        ("lease_backend", lambda: check_lease_backend(status)),
        ("leader", lambda: check_leader(status)),
        ("leader_tick", lambda: check_leader_tick(status, now)),
        ("dispatch_lag", lambda: check_dispatch_lag(status)),
        ("waiting_runs", lambda: check_waiting_runs(now)),
        ("running_runs", lambda: check_running_runs(now)),
        ("clock_skew", lambda: check_clock_skew(status)),
        ("pruning", lambda: check_pruning(status)),
        ("declared_jobs", check_declared_jobs),
    ]
    if broker:
        checks.append(("broker", check_broker))
    for name, check in checks:
        try:
            report.checks.append(check())
        except Exception as exc:  # a check that cannot run is a failed check, not a crash
            report.checks.append(Check(name, FAIL, f"could not check: {type(exc).__name__}: {exc}"))
    return report


def check_lease_backend(status: ClusterStatus) -> Check:
    if status.backend_error:
        return Check("lease_backend", FAIL, f"{status.backend} unreachable: {status.backend_error}")
    return Check("lease_backend", OK, f"{status.backend} reachable")


def check_leader(status: ClusterStatus) -> Check:
    if status.backend_error:
        return Check("leader", FAIL, "unknown: the lease backend cannot be read")
    if status.leader_node is None:
        return Check("leader", FAIL, "no scheduler holds the lease")
    left = f", lease {status.lease_left:.1f} s left" if status.lease_left is not None else ""
    return Check("leader", OK, f"{status.leader_node} holds the lease (epoch {status.epoch}{left})")


def stale_after() -> float:
    """A leader whose last tick is older than this (seconds) is stuck or gone."""
    return max(30.0, 3 * app_settings.LEASE_TTL)


def check_leader_tick(status: ClusterStatus, now: datetime) -> Check:
    report = status.leader_report
    if report is None:
        return Check("leader_tick", FAIL, "the leader has not reported (or there is no leader)")
    last_tick = report.get("last_tick")
    if not last_tick:
        return Check("leader_tick", FAIL, f"{report.get('node')} has not ticked as leader yet")
    age = (now - as_utc(str(last_tick))).total_seconds()
    limit = stale_after()
    if age > limit:
        return Check("leader_tick", FAIL, f"last tick {age:.1f} s ago (limit {limit:g} s)", age)
    return Check("leader_tick", OK, f"last tick {max(age, 0):.1f} s ago", age)


def check_dispatch_lag(status: ClusterStatus) -> Check:
    report = status.leader_report
    lag = None if report is None else report.get("lag")
    if lag is None:
        return Check("dispatch_lag", OK, "nothing dispatched on time yet by this leader")
    lag = float(lag)
    grace = app_settings.ON_TIME_GRACE.total_seconds()
    if lag > grace:
        return Check(
            "dispatch_lag",
            FAIL,
            f"last on-time slot published {lag:.3f} s late (> {grace:g} s)",
            lag,
        )
    if lag > LAG_WARN:
        return Check(
            "dispatch_lag", WARN, f"last on-time slot published {lag:.3f} s late (> 1 s)", lag
        )
    return Check("dispatch_lag", OK, f"last on-time slot published {lag:.3f} s after its time", lag)


def check_waiting_runs(now: datetime) -> Check:
    """Runs recorded but not started: a worker fleet that is down or far behind."""
    from ..ledger.outbox import oldest_pending_slot

    oldest = oldest_pending_slot(now)
    if oldest is None:
        return Check("waiting_runs", OK, "no run is waiting for a worker")
    age = (now - oldest).total_seconds()
    republish = app_settings.OUTBOX_REPUBLISH_AFTER.total_seconds()
    # 16 x: the longest the outbox waits between copies of a run (see the scheduler docs).
    if age > 16 * republish:
        return Check(
            "waiting_runs", FAIL, f"the oldest waiting run is {age:.0f} s past its slot", age
        )
    if age > 2 * republish:
        return Check(
            "waiting_runs", WARN, f"the oldest waiting run is {age:.0f} s past its slot", age
        )
    return Check("waiting_runs", OK, f"the oldest waiting run is {age:.1f} s past its slot", age)


def check_running_runs(now: datetime) -> Check:
    """Runs whose worker stopped beating: the leader declares them lost within a sweep."""
    lost_after = app_settings.RUN_LOST_AFTER
    oldest = (
        JobRun.objects.filter(status__in=EXECUTING_STATUSES, heartbeat_at__lt=now - lost_after)
        .order_by("heartbeat_at")
        .values_list("heartbeat_at", flat=True)
        .first()
    )
    if oldest is None:
        return Check("running_runs", OK, "every running run has a recent heartbeat")
    silent = (now - as_utc(oldest)).total_seconds()
    if silent > 3 * lost_after.total_seconds():
        return Check(
            "running_runs",
            FAIL,
            f"a running run has not beaten for {silent:.0f} s and was not recovered",
            silent,
        )
    return Check(
        "running_runs",
        WARN,
        f"a running run has not beaten for {silent:.0f} s (being recovered)",
        silent,
    )


def check_pruning(status: ClusterStatus) -> Check:
    """Runs past their retention, as the leader's last pruning pass measured them: the oldest one
    past twice its period means pruning fell behind (the passes cannot keep up, fail, or are off
    with no ``prune_runs`` in their place). No query: the leader's report says it."""
    report = status.leader_report
    found = None if report is None else report.get("prunable")
    if found is None:
        return Check("pruning", OK, "not measured yet by this leader")
    if not found:
        return Check("pruning", OK, "no run is past its retention", 0.0)
    age, days = float(found["age"]), int(found["days"])
    shown = age / 86_400
    if age > 2 * days * 86_400:
        return Check(
            "pruning",
            WARN,
            f"pruning is behind: the oldest run past its retention is {shown:.1f} days old, "
            f"more than twice its {days} days",
            age,
        )
    return Check(
        "pruning",
        OK,
        f"the oldest run past its retention ({days} days) is {shown:.1f} days old",
        age,
    )


def check_clock_skew(status: ClusterStatus) -> Check:
    skewed = [r for r in status.nodes if r.get("clock_skewed")]
    if not skewed:
        measured = [
            abs(float(r["clock_offset"])) for r in status.nodes if r.get("clock_offset") is not None
        ]
        worst = max(measured, default=0.0)
        return Check("clock_skew", OK, f"largest node clock offset {worst:.3f} s", worst)
    described = ", ".join(f"{r.get('node')} {float(r['clock_offset']):+.3f} s" for r in skewed)
    worst = max(abs(float(r["clock_offset"])) for r in skewed)
    return Check(
        "clock_skew",
        WARN,
        f"clocks off the database's: {described} (slots still run on the database's time)",
        worst,
    )


def check_declared_jobs() -> Check:
    """Jobs declared in this process's code that a sync leaves out (invalid, or unreadable): a
    warning, not a failure, since every other job runs; these do not follow their code (a job
    synced before keeps its last synced definition) until the declaration is fixed. Reads no
    database: it validates the declarations as ``manage.py check`` does."""
    from ..declared import collect

    declared = collect()
    if not declared.rejected:
        count = len(declared.valid)
        reason = f"{count} job(s) declared in code, all valid" if count else "no job declared"
        return Check("declared_jobs", OK, reason, 0)
    left_out = "; ".join(f"{r.name!r} ({r.text()})" for r in declared.rejected)
    return Check(
        "declared_jobs",
        WARN,
        f"{len(declared.rejected)} declared job(s) left out of the sync: {left_out}",
        len(declared.rejected),
    )


def runs_on_celery() -> bool:
    """Whether a live job's task is a Celery task: only such a job's runs (scheduled, or run now
    while it is paused) go through the broker; a ``django.tasks`` task's go to its backend. One
    query: the live jobs' task names, each told apart as the dispatcher does."""
    from ..djtasks_app import resolve_task

    names = JobDefinition.objects.order_by().values_list("task", flat=True).distinct()
    return any(resolve_task(name) is None for name in names)


def check_broker() -> Check:
    """The Celery broker takes a connection, when a job needs it: a cluster whose jobs all run
    as ``django.tasks`` tasks (or that has none) never connects to a broker, and is not judged
    by one it does not have (Celery's default, ``amqp://localhost``)."""
    if not runs_on_celery():
        return Check("broker", OK, "not checked: no job runs on Celery")
    from ..celery_app import get_celery_app

    app = get_celery_app()
    with app.connection_for_write() as connection:
        try:
            connection.ensure_connection(max_retries=1, timeout=3)
            connection.default_channel  # noqa: B018 - opening a channel reaches the server
        except Exception as exc:
            return Check("broker", FAIL, f"unreachable: {type(exc).__name__}: {exc}")
        return Check("broker", OK, f"reachable ({connection.transport_cls})")
