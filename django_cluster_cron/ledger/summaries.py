"""The daily summaries of the ledger: one :class:`~django_cluster_cron.models.RunSummary` per job
and UTC day of slots (runs by status, retries, duration p50/p95, lateness p95), the trend that
outlives the runs once they are pruned.

A day is summed up by the leader once it has been over for :data:`SETTLE` (its pruning thread,
one day a pass, the last :data:`DAYS_BACK` days), or before the first of its runs is pruned if
that comes first; either way once: a run of that day that changes later is not recounted, and
those still waiting or running then count as ``unfinished``. Runs recorded into a summed-up day
later (a backfill) are added as they are pruned. What the pages show of a job's trend
(:func:`trends`, :func:`daily`) reads the summaries, and the live ledger only for the one job's
days not yet summed up.

Percentiles are the nearest rank. PostgreSQL sums a day up in one statement
(``percentile_disc``); the other databases hand the day's rows to Python, which sums them the
same way (a test holds the two to each other).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

from django.db import connection
from django.db.models import Count, F, Sum

from ..conf import app_settings
from ..core.retention import FINAL
from ..models import JobRun, RunSummary
from ..models.bulk import AnyOf, MomentText, moment_reader

__all__ = [
    "COUNTED",
    "DAYS_BACK",
    "SETTLE",
    "daily",
    "day_of",
    "ended_days",
    "percentile",
    "sum_up",
    "sum_up_day",
    "summarise",
    "trends",
]

# Jobs whose day is summed up per query.
JOBS_PER_QUERY = 200
# A day is summed up once it has been over this long: the runs of its last minutes finish first.
SETTLE = timedelta(hours=1)
# How many ended days back the leader looks for days not yet summed up.
DAYS_BACK = 7
# The days of a job's history drawn from the live ledger, at most, when they have no summary yet.
LIVE_DAYS = 3


def day_of(slot: datetime) -> date:
    return slot.astimezone(timezone.utc).date()


def sum_up(
    batch: Sequence[tuple[int, int, str, date, datetime]],
    *,
    now: datetime,
    step: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> int:
    """Write the summary of every (job, day) of ``batch`` (rows of id, job, status, the slot's
    UTC day, created) that has none, from all the day's runs; add to an existing one the rows of
    the batch recorded after it. Each statement's worth of writes runs in a ``step`` (the
    leader's: a fenced transaction of its own). Returns how many summaries were written."""
    days: dict[date, set[int]] = defaultdict(set)
    oldest_kept = now.date() - timedelta(days=app_settings.SUMMARY_RETENTION_DAYS)
    for _, job_id, _, day, _ in batch:
        if day >= oldest_kept:  # an older day's summary would go in the same pass
            days[day].add(job_id)
    read = moment_reader()
    summed_at: dict[tuple[int, date], datetime | None] = {}
    for day, jobs in days.items():
        # The jobs as one array and the moments as text: a pass asks this of a thousand jobs.
        found = RunSummary.objects.filter(AnyOf("job_id", sorted(jobs)), day=day)
        for job_id, at in found.annotate(at=MomentText("summed_at")).values_list("job_id", "at"):
            summed_at[(job_id, day)] = read(at)
    written = 0
    for day, jobs in days.items():
        missing = sorted(job for job in jobs if (job, day) not in summed_at)
        written += _write(missing, day, now=now, step=step)
    late: dict[tuple[int, date], Counter[str]] = defaultdict(Counter)
    for _, job_id, status, day, created in batch:
        at = summed_at.get((job_id, day))
        if at is not None and created > at:
            late[(job_id, day)][status] += 1
    if late:
        with step():
            for (job_id, day), counts in late.items():
                RunSummary.objects.filter(job_id=job_id, day=day).update(
                    **{status: F(status) + count for status, count in counts.items()}
                )
    return written


def _write(
    jobs: Sequence[int],
    day: date,
    *,
    now: datetime,
    step: Callable[[], AbstractContextManager[Any]],
) -> int:
    """Sum up and write ``day`` of ``jobs``, JOBS_PER_QUERY jobs a step; how many written."""
    written = 0
    for start in range(0, len(jobs), JOBS_PER_QUERY):
        with step():
            summaries = summarise(jobs[start : start + JOBS_PER_QUERY], day, now=now)
            RunSummary.objects.bulk_create(summaries, ignore_conflicts=True)
        written += len(summaries)
    return written


def ended_days(now: datetime) -> list[date]:
    """The days the leader sums up at ``now``, oldest first: the last DAYS_BACK UTC days that
    have been over for at least SETTLE."""
    newest = (now - SETTLE).astimezone(timezone.utc).date() - timedelta(days=1)
    return [newest - timedelta(days=back) for back in range(DAYS_BACK - 1, -1, -1)]


def _bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(0), tzinfo=timezone.utc)
    return start, start + timedelta(days=1)


def sum_up_day(
    day: date,
    *,
    now: datetime,
    step: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> int:
    """Write the summary of ``day`` for each job with a run that day and none yet, a step per
    JOBS_PER_QUERY jobs; returns how many were written."""
    start, end = _bounds(day)
    jobs = set(
        JobRun.objects.filter(scheduled_for__gte=start, scheduled_for__lt=end)
        .order_by()
        .values_list("job_id", flat=True)
        .distinct()
    )
    jobs -= set(RunSummary.objects.filter(day=day).values_list("job_id", flat=True))
    return _write(sorted(jobs), day, now=now, step=step)


def summarise(
    jobs: Sequence[int], day: date, *, now: datetime, in_python: bool = False
) -> list[RunSummary]:
    """The summaries of ``jobs`` on ``day`` from the runs of that day in the ledger (those with
    no run that day get none). PostgreSQL sums them up itself (``percentile_disc`` is the
    nearest rank); elsewhere, or ``in_python``, the rows are read and summed up here."""
    start, end = _bounds(day)
    if connection.vendor == "postgresql" and not in_python:
        return _summarise_in_sql(jobs, day, start, end, now)
    rows = JobRun.objects.filter(
        job_id__in=jobs, scheduled_for__gte=start, scheduled_for__lt=end
    ).values_list(
        "job_id", "status", "attempt", "duration", "started_at", "due_at", "scheduled_for"
    )
    tallies: dict[int, _Tally] = defaultdict(_Tally)
    for job_id, status, attempt, duration, started, due, slot in rows:
        tallies[job_id].add(status, attempt, duration, started, due or slot)
    return [tally.summary(job_id, day, now) for job_id, tally in tallies.items()]


COUNTED = (*FINAL, "unfinished")


def _summarise_in_sql(
    jobs: Sequence[int], day: date, start: datetime, end: datetime, now: datetime
) -> list[RunSummary]:
    # GREATEST ignores a NULL: a run never started must stay out of the percentile.
    lateness = (
        "CASE WHEN started_at IS NOT NULL THEN "
        "GREATEST(started_at - COALESCE(due_at, scheduled_for), interval '0') END"
    )
    counts = ", ".join("COUNT(*) FILTER (WHERE status = %s)" for _ in FINAL)
    sql = f"""
        SELECT job_id, {counts},
               COUNT(*) FILTER (WHERE status <> ALL(%s)),
               COALESCE(SUM(GREATEST(attempt - 1, 0)), 0),
               EXTRACT(EPOCH FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY duration)),
               EXTRACT(EPOCH FROM percentile_disc(0.95) WITHIN GROUP (ORDER BY duration)),
               EXTRACT(EPOCH FROM percentile_disc(0.95) WITHIN GROUP (ORDER BY {lateness}))
        FROM {JobRun._meta.db_table}
        WHERE job_id = ANY(%s) AND scheduled_for >= %s AND scheduled_for < %s
        GROUP BY job_id
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [*FINAL, list(FINAL), list(jobs), start, end])
        rows = cursor.fetchall()
    summaries = []
    for job_id, *numbers in rows:
        tallied = dict(zip(COUNTED, numbers[: len(COUNTED)], strict=True))
        retries, p50, p95, late95 = numbers[len(COUNTED) :]
        summaries.append(
            RunSummary(
                job_id=job_id,
                day=day,
                **tallied,
                retries=retries,
                duration_p50=None if p50 is None else float(p50),
                duration_p95=None if p95 is None else float(p95),
                lateness_p95=None if late95 is None else float(late95),
                summed_at=now,
            )
        )
    return summaries


@dataclass
class _Tally:
    counts: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    durations: list[float] = field(default_factory=list)
    lateness: list[float] = field(default_factory=list)

    def add(
        self,
        status: str,
        attempt: int,
        duration: timedelta | None,
        started: datetime | None,
        due: datetime,
    ) -> None:
        self.counts[status if status in FINAL else "unfinished"] += 1
        self.retries += max(0, attempt - 1)
        if duration is not None:
            self.durations.append(duration.total_seconds())
        if started is not None:
            self.lateness.append(max(0.0, (started - due).total_seconds()))

    def summary(self, job_id: int, day: date, now: datetime) -> RunSummary:
        return RunSummary(
            job_id=job_id,
            day=day,
            **{status: self.counts[status] for status in COUNTED},
            retries=self.retries,
            duration_p50=percentile(self.durations, 50),
            duration_p95=percentile(self.durations, 95),
            lateness_p95=percentile(self.lateness, 95),
            summed_at=now,
        )


def percentile(values: list[float], p: float) -> float | None:
    """The nearest-rank percentile: the smallest value with at least ``p`` % of the values at or
    below it (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# -- reading them -------------------------------------------------------------------------


@dataclass(frozen=True)
class Trend:
    """One job's runs over some days, by status (the final ones and ``unfinished``)."""

    counts: dict[str, int]
    days: int  # the days that had a summary (or, for one job's history, live runs)

    @property
    def runs(self) -> int:
        return sum(self.counts.values())

    @property
    def success_rate(self) -> float | None:
        """Successes among the runs that succeeded or failed (None: none did)."""
        finished = self.counts.get("success", 0) + self.counts.get("failed", 0)
        return None if not finished else self.counts.get("success", 0) / finished


def trends(job_ids: Sequence[int], *, days: int, now: datetime) -> dict[int, Trend]:
    """Each job's runs over the ``days`` days before today (UTC), from the summaries alone: one
    query for a page of jobs, whatever the ledger holds. Jobs with no summary are left out."""
    if not job_ids:
        return {}
    today = now.astimezone(timezone.utc).date()
    rows = (
        RunSummary.objects.filter(
            job_id__in=job_ids, day__gte=today - timedelta(days=days), day__lt=today
        )
        .order_by()
        .values("job_id")
        .annotate(days=Count("pk"), **{status: Sum(status) for status in COUNTED})
    )
    return {
        row["job_id"]: Trend({status: int(row[status]) for status in COUNTED}, row["days"])
        for row in rows
    }


def daily(job_id: int, *, days: int, now: datetime) -> dict[date, dict[str, int]]:
    """One job's runs of each of the last ``days`` UTC days (today included) by status: the
    summaries, and for the newest LIVE_DAYS days that have none yet the live ledger (one
    grouped count over those days' slots). Days with neither are left out."""
    today = now.astimezone(timezone.utc).date()
    first = today - timedelta(days=days - 1)
    found: dict[date, dict[str, int]] = {
        summary["day"]: {status: summary[status] for status in COUNTED}
        for summary in RunSummary.objects.filter(job_id=job_id, day__gte=first).values(
            "day", *COUNTED
        )
    }
    live = [
        day
        for back in range(LIVE_DAYS)
        if (day := today - timedelta(days=back)) not in found and day >= first
    ]
    if live:
        start, _ = _bounds(min(live))
        _, end = _bounds(max(live))
        rows = (
            JobRun.objects.filter(job_id=job_id, scheduled_for__gte=start, scheduled_for__lt=end)
            .order_by()
            .values_list("scheduled_for", "status")
        )
        counted: dict[date, Counter[str]] = defaultdict(Counter)
        for slot, status in rows.iterator(chunk_size=2000):
            counted[day_of(slot)][status if status in FINAL else "unfinished"] += 1
        for day in live:
            if day in counted:
                found[day] = dict(counted[day])
    return dict(sorted(found.items()))
