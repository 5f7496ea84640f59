"""Small renderers shared by the admin pages: timestamps (and the columns that show them),
status badges, the run strip, durations.

One rule for every timestamp the admin shows (:func:`moment`): to the second, with its zone's
abbreviation, in the job's time zone where the time belongs to a job (its slots, its runs, its
history) and in UTC elsewhere (the cluster page); hovering shows it in UTC to the millisecond.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from django.contrib import admin
from django.db import connection
from django.db.models import F, Min, Window
from django.db.models.functions import RowNumber
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..core.errors import ScheduleError
from ..core.timezones import get_zone
from ..models import JobDefinition, JobRun, RunStatus, not_ahead
from ..models.bulk import through_index
from ..models.runs import ONE_PER_SLOT

UTC = timezone.utc

COLOURS: dict[str, str] = {
    RunStatus.SUCCESS: "#2e7d32",
    RunStatus.FAILED: "#c62828",
    RunStatus.RETRYING: "#ef6c00",
    RunStatus.RUNNING: "#1565c0",
    RunStatus.QUEUED: "#607d8b",
    RunStatus.PENDING: "#90a4ae",
    RunStatus.MISSED: "#8e24aa",
    RunStatus.SKIPPED: "#9e9e9e",
    RunStatus.CANCELLED: "#5d4037",
    RunStatus.UNCERTAIN: "#f9a825",
    RunStatus.BUFFERED: "#b0bec5",
    RunStatus.TERMINATING: "#6d4c41",
}
AHEAD_COLOUR = "#b0bec5"
RECENT_RUNS = 20


def zone_of(job: JobDefinition | None) -> tzinfo:
    """The job's time zone for display; UTC for no job or a row whose zone is invalid."""
    if job is None:
        return UTC
    try:
        return get_zone(job.timezone)
    except ScheduleError:
        return UTC


def moment(
    value: datetime | str | None, zone: tzinfo | None = None, *, day: datetime | None = None
) -> SafeString | str:
    """A timestamp as every admin page shows it (see the module's docstring).

    ``day``: leave the date out when it is that moment's date in ``zone`` (a run's start beside
    its slot). Strings are ISO 8601, as node reports hold them; naive values are UTC.
    """
    if value is None or value == "":
        return "—"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    zone = zone or UTC
    utc = value.astimezone(UTC)
    local = value.astimezone(zone)
    same_day = day is not None and day.astimezone(zone).date() == local.date()
    shown = f"{local:%H:%M:%S}" if same_day else f"{local:%Y-%m-%d %H:%M:%S}"
    # A no-break space keeps the zone with the time; a list cell may wrap before the time.
    return format_html(
        '<time class="dcc-time" datetime="{}" title="{}">{}\u00a0{}</time>',
        utc.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        f"{utc:%Y-%m-%d %H:%M:%S}.{utc.microsecond // 1000:03d} UTC",
        shown,
        local.tzname() or "UTC",
    )


def moment_column(
    field: str, description: str, *, ordering: str | None = None, day: str | None = None
) -> Callable[[Any, JobDefinition | JobRun], SafeString | str]:
    """An admin column (or read-only field) that shows the timestamp ``field`` as :func:`moment`
    does, in the job's time zone: the object's own (a job) or its job's (a run). ``day`` names the
    field whose date it leaves out when it is the same (a run's start beside its slot)."""

    def column(model_admin: Any, obj: JobDefinition | JobRun) -> SafeString | str:
        job = obj.job if isinstance(obj, JobRun) else obj
        return moment(getattr(obj, field), zone_of(job), day=getattr(obj, day) if day else None)

    return admin.display(description=description, ordering=ordering)(column)


def badge(status: str, why: str = "") -> SafeString:
    """A run status as a coloured pill; ``why`` (the run's reason) shows on hover."""
    colour = COLOURS.get(status, "#777")
    return format_html(
        '<span class="dcc-status" style="background:{};color:#fff;padding:1px 6px;'
        'border-radius:8px;white-space:nowrap"{}>{}</span>',
        colour,
        format_html(' title="{}"', why) if why else "",
        status,
    )


def is_ahead(run: JobRun, now: datetime) -> bool:
    """Recorded ahead of its time: pending, its due time still to come (it is not late)."""
    return run.status == RunStatus.PENDING and run.due_at is not None and run.due_at > now


def run_badge(run: JobRun, now: datetime) -> SafeString:
    """:func:`badge`, but a run recorded ahead says so (and when it is due) instead of looking
    like one waiting for the broker."""
    if not is_ahead(run, now):
        return badge(run.status, run.reason)
    assert run.due_at is not None
    due = run.due_at.astimezone(UTC)
    return format_html(
        '<span class="dcc-status" style="background:{};color:#263238;padding:1px 6px;'
        'border-radius:8px;white-space:nowrap" title="{}">ahead</span>',
        AHEAD_COLOUR,
        f"recorded ahead of its time: its message is sent at {due:%Y-%m-%d %H:%M:%S} UTC",
    )


def duration_text(value: timedelta | None) -> str:
    if value is None:
        return "—"
    seconds = value.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 120:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def ahead_due_by_job(job_ids: Sequence[int], now: datetime) -> dict[int, datetime]:
    """The earliest due time of each job's runs recorded ahead (its next run, already recorded:
    ``next_run_at`` is then the instant after it), in one query."""
    if not job_ids:
        return {}
    rows = (
        JobRun.objects.filter(job_id__in=job_ids, status=RunStatus.PENDING, due_at__gt=now)
        .values("job_id")
        .annotate(first=Min("due_at"))
        .order_by()
    )
    return {row["job_id"]: row["first"] for row in rows}


def recent_runs_by_job(
    job_ids: Sequence[int], now: datetime | None = None
) -> dict[int, list[dict[str, Any]]]:
    """The last RECENT_RUNS runs of each job (newest first), in one query for a whole page;
    runs recorded ahead of their time are not among them."""
    if not job_ids:
        return {}
    now = now or datetime.now(UTC)
    fields = ("job_id", "status", "duration", "scheduled_for")
    rows: Any
    if connection.features.supports_slicing_ordering_in_compound:
        # One "newest 20 of this job" index scan per job, glued with UNION ALL: its cost does not
        # grow with the size of the ledger (a window over every run of the page's jobs would).
        parts = [
            not_ahead(JobRun.objects.filter(job_id=job_id), now)
            .order_by("-scheduled_for")
            .values(*fields)[:RECENT_RUNS]
            for job_id in job_ids
        ]
        union = parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0]
        with through_index(JobRun, ONE_PER_SLOT):
            rows = list(union)
    else:  # SQLite: no LIMIT inside a compound query; a window does the same on small ledgers
        rows = (
            not_ahead(JobRun.objects.filter(job_id__in=job_ids), now)
            .annotate(
                position=Window(
                    RowNumber(), partition_by=[F("job_id")], order_by=F("scheduled_for").desc()
                )
            )
            .filter(position__lte=RECENT_RUNS)
            .values(*fields)
        )
    recent: dict[int, list[dict[str, Any]]] = {job_id: [] for job_id in job_ids}
    for row in rows:
        recent[row["job_id"]].append(row)
    for runs in recent.values():
        runs.sort(key=lambda row: row["scheduled_for"], reverse=True)
    return recent


def run_strip(runs: Sequence[dict[str, Any]], zone: tzinfo | None = None) -> SafeString | str:
    """An inline SVG of the runs, oldest left: colour = status, height = duration (log scale);
    each bar's slot, status and duration on hover (the slot in ``zone``)."""
    if not runs:
        return "—"
    ordered = list(reversed(runs))
    seconds = [r["duration"].total_seconds() if r["duration"] else 0.0 for r in ordered]
    peak = max(seconds) or 1.0
    bars = []
    for index, (run, secs) in enumerate(zip(ordered, seconds, strict=True)):
        height = 4 + 14 * (math.log1p(secs) / math.log1p(peak) if peak > 0 else 0)
        when: datetime = run["scheduled_for"].astimezone(zone or UTC)
        title = (
            f"{when:%Y-%m-%d %H:%M:%S} {when.tzname()} {run['status']} "
            f"{duration_text(run['duration'])}"
        )
        bars.append(
            (
                index * 6,
                f"{20 - height:.1f}",
                f"{height:.1f}",
                COLOURS.get(run["status"], "#777"),
                title,
            )
        )
    return format_html(
        '<svg class="dcc-strip" width="{}" height="20" role="img" aria-label="last {} runs">'
        "{}</svg>",
        len(bars) * 6,
        len(bars),
        format_html_join(
            "",
            '<rect x="{}" y="{}" width="5" height="{}" fill="{}"><title>{}</title></rect>',
            bars,
        ),
    )


def success_rate(runs: Sequence[dict[str, Any]]) -> str:
    finished = [r for r in runs if r["status"] in (RunStatus.SUCCESS, RunStatus.FAILED)]
    if not finished:
        return "—"
    ok = sum(1 for r in finished if r["status"] == RunStatus.SUCCESS)
    return f"{100 * ok / len(finished):.0f}% of {len(finished)}"


def ledger_size(found: dict[str, Any] | None, now: float | None = None) -> str:
    """The ledger's size in words, from its last measurement: ``About 3,012,400 runs: 100,000+
    success, 1,204 failed, 3 running (counted 40 s ago)`` ("" while none has been made). Never
    a count of the ledger on a page view."""
    if not found:
        return ""
    total = found.get("total")
    by_status = found.get("by_status") or {}
    parts = [
        f"{status_count(found, status)} {status}"
        for status, count in sorted(by_status.items(), key=lambda item: -int(item[1]))
    ]
    head = f"About {int(total):,} runs" if isinstance(total, int) else "Runs"
    at = found.get("at")
    if isinstance(at, (int, float)):
        age = max(0.0, (time.time() if now is None else now) - at)
        when = f"{age:.0f} s" if age < 120 else f"{age / 60:.0f} min"
        tail = f" (counted {when} ago)"
    else:
        tail = " (as the leader last counted them)"
    return head + (": " + ", ".join(parts) if parts else "") + tail


def status_count(found: dict[str, Any] | None, status: str) -> str:
    """How many runs of ``status`` the last measurement found, in words: ``1,204``, ``100,000+``
    past the cap, ``0`` for none ("" with no measurement)."""
    if not found:
        return ""
    count, cap = int((found.get("by_status") or {}).get(status, 0)), int(found.get("cap") or 0)
    return f"{cap:,}+" if cap and count > cap else f"{count:,}"
