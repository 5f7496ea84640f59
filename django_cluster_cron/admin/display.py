"""Small renderers shared by the admin pages: status badges, the run strip, durations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..models import JobRun, RunStatus

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
}
RECENT_RUNS = 20


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


def recent_runs_by_job(job_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    """The last RECENT_RUNS runs of each job (newest first), in one query for a whole page."""
    if not job_ids:
        return {}
    fields = ("job_id", "status", "duration", "scheduled_for")
    rows: Any
    if connection.features.supports_slicing_ordering_in_compound:
        # One "newest 20 of this job" index scan per job, glued with UNION ALL: its cost does not
        # grow with the size of the ledger (a window over every run of the page's jobs would).
        parts = [
            JobRun.objects.filter(job_id=job_id)
            .order_by("-scheduled_for")
            .values(*fields)[:RECENT_RUNS]
            for job_id in job_ids
        ]
        rows = parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0]
    else:  # SQLite: no LIMIT inside a compound query; a window does the same on small ledgers
        rows = (
            JobRun.objects.filter(job_id__in=job_ids)
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


def run_strip(runs: Sequence[dict[str, Any]]) -> SafeString | str:
    """An inline SVG of the runs, oldest left: colour = status, height = duration (log scale)."""
    if not runs:
        return "—"
    ordered = list(reversed(runs))
    seconds = [r["duration"].total_seconds() if r["duration"] else 0.0 for r in ordered]
    peak = max(seconds) or 1.0
    bars = []
    for index, (run, secs) in enumerate(zip(ordered, seconds, strict=True)):
        height = 4 + 14 * (math.log1p(secs) / math.log1p(peak) if peak > 0 else 0)
        when: datetime = run["scheduled_for"]
        title = f"{when:%Y-%m-%d %H:%M:%S}Z {run['status']} {duration_text(run['duration'])}"
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
