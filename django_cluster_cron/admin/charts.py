"""Pictures in the admin, drawn on the server as inline SVG (no script, no CDN): a job's recent
runs as a timeline, its runs of each day as stacked bars (from the daily summaries, so pruning
erases no day), and the coming dispatches of all jobs as a histogram."""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

from django.db.models import QuerySet
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..core.forecast import Forecast
from ..models import JobRun
from .display import COLOURS, UTC, duration_text

TIMELINE_RUNS = 60
# Drawing sizes in SVG units; the SVG scales down to the page's width.
WIDTH, LEFT, RIGHT = 720, 8, 8
PLOT = WIDTH - LEFT - RIGHT


def _clock(value: datetime, zone: tzinfo) -> str:
    local = value.astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname() or 'UTC'}"


def run_timeline(runs: QuerySet[JobRun], zone: tzinfo = UTC) -> SafeString | str:
    """The job's last TIMELINE_RUNS runs placed by slot time: colour = status, height =
    duration (log scale), each a link to its run with slot, status and duration on hover."""
    fields = ("pk", "scheduled_for", "status", "duration", "attempt")
    rows: list[dict[str, Any]] = list(
        runs.order_by("-scheduled_for").values(*fields)[:TIMELINE_RUNS]
    )
    if not rows:
        return "No runs yet."
    rows.reverse()
    first, last = rows[0]["scheduled_for"], rows[-1]["scheduled_for"]
    span = (last - first).total_seconds() or 1.0
    bar = max(2.0, min(10.0, PLOT / len(rows) - 1))
    durations = [r["duration"].total_seconds() if r["duration"] else 0.0 for r in rows]
    peak = max(durations) or 1.0
    bars = []
    for row, seconds in zip(rows, durations, strict=True):
        x = LEFT + (row["scheduled_for"] - first).total_seconds() / span * (PLOT - bar)
        height = 6 + 54 * math.log1p(seconds) / math.log1p(peak)
        title = (
            f"{_clock(row['scheduled_for'], zone)}: {row['status']}, "
            f"{duration_text(row['duration'])}"
            + (f", attempt {row['attempt']}" if row["attempt"] > 1 else "")
        )
        url = reverse("admin:django_cluster_cron_jobrun_change", args=[row["pk"]])
        colour = COLOURS.get(row["status"], "#777")
        bars.append(
            (url, f"{x:.1f}", f"{64 - height:.1f}", f"{bar:.1f}", f"{height:.1f}", colour, title)
        )
    return format_html(
        '<svg class="dcc-chart dcc-timeline" viewBox="0 0 {} 84" role="img" aria-label="{}">'
        "{}"
        '<line x1="{}" y1="65" x2="{}" y2="65" stroke="currentColor" stroke-opacity=".3"/>'
        '<text x="{}" y="80" font-size="11" fill="currentColor">{}</text>'
        '<text x="{}" y="80" font-size="11" fill="currentColor" text-anchor="end">{}</text>'
        "</svg>"
        '<p class="help">The last {} runs by slot; height is the duration (longest {}), '
        "colour the status. Hover for details; click to open a run.</p>",
        WIDTH,
        f"the last {len(rows)} runs",
        format_html_join(
            "",
            '<a href="{}"><rect x="{}" y="{}" width="{}" height="{}" fill="{}">'
            "<title>{}</title></rect></a>",
            bars,
        ),
        LEFT,
        WIDTH - RIGHT,
        LEFT,
        _clock(first, zone),
        WIDTH - RIGHT,
        _clock(last, zone),
        len(rows),
        duration_text(rows[durations.index(max(durations))]["duration"]),
    )


HISTORY_DAYS = 90
# Bottom to top in each day's bar; "unfinished" is what was still waiting or running.
STACKED = ("success", "skipped", "missed", "cancelled", "uncertain", "failed", "unfinished")


def daily_history(days: dict[date, dict[str, int]], today: date) -> SafeString | str:
    """The HISTORY_DAYS days up to ``today`` as bars stacked by status, each day's counts on
    hover; a day with nothing known leaves a gap."""
    if not days:
        return "No day summed up yet."
    first = today - timedelta(days=HISTORY_DAYS - 1)
    peak = max(sum(counts.values()) for counts in days.values()) or 1
    width = PLOT / HISTORY_DAYS
    rects = []
    for day, counts in days.items():
        x = LEFT + (day - first).days * width
        top = 64.0
        for status in STACKED:
            count = counts.get(status, 0)
            if not count:
                continue
            height = 60 * count / peak
            top -= height
            rects.append(
                (
                    f"{x:.1f}",
                    f"{top:.1f}",
                    f"{max(width - 1, 1):.1f}",
                    f"{height:.1f}",
                    COLOURS.get(status, "#90a4ae"),
                    f"{day:%Y-%m-%d}: "
                    + ", ".join(f"{n:,} {s}" for s, n in counts.items() if n)
                    + f" ({sum(counts.values()):,} runs)",
                )
            )
    return format_html(
        '<svg class="dcc-chart dcc-daily" viewBox="0 0 {} 84" role="img" aria-label="{}">'
        "{}"
        '<line x1="{}" y1="65" x2="{}" y2="65" stroke="currentColor" stroke-opacity=".3"/>'
        '<text x="{}" y="80" font-size="11" fill="currentColor">{}</text>'
        '<text x="{}" y="80" font-size="11" fill="currentColor" text-anchor="end">{}</text>'
        "</svg>"
        '<p class="help">Runs of each day (UTC) over the last {} days, by status; the most in a '
        "day {}. Days before today come from the daily summaries, which outlive the pruned runs."
        "</p>",
        WIDTH,
        f"runs per day over the last {HISTORY_DAYS} days",
        format_html_join(
            "",
            '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
            rects,
        ),
        LEFT,
        WIDTH - RIGHT,
        LEFT,
        f"{first:%Y-%m-%d}",
        WIDTH - RIGHT,
        f"{today:%Y-%m-%d}",
        HISTORY_DAYS,
        f"{peak:,}",
    )


def forecast_chart(found: Forecast, zone: tzinfo = UTC) -> SafeString:
    """Dispatches per bucket as bars (the busiest in red), each with its count and its top jobs
    on hover, and the window's start and end below."""
    peak = found.peak or 1
    width = PLOT / len(found.buckets)
    bars = []
    for bucket in found.buckets:
        height = 0.0 if not bucket.count else 2 + 118 * bucket.count / peak
        title = f"{_clock(bucket.start, zone)}: {bucket.count} dispatch(es)"
        if bucket.jobs:
            title += ": " + ", ".join(f"{n} ({c})" for n, c in bucket.jobs.most_common(3))
            if len(bucket.jobs) > 3:
                title += f" and {len(bucket.jobs) - 3} more job(s)"
        colour = "#c62828" if bucket.count == found.peak and bucket.count else "#1565c0"
        x = LEFT + (bucket.start - found.start) / (found.end - found.start) * PLOT
        y, bar = f"{122 - height:.1f}", f"{max(width - 1, 1):.1f}"
        bars.append((f"{x:.1f}", y, bar, f"{height:.1f}", colour, title))
    return format_html(
        '<svg class="dcc-chart dcc-forecast" viewBox="0 0 {} 140" role="img" aria-label="{}">'
        "{}"
        '<line x1="{}" y1="123" x2="{}" y2="123" stroke="currentColor" stroke-opacity=".3"/>'
        '<text x="{}" y="137" font-size="11" fill="currentColor">{}</text>'
        '<text x="{}" y="137" font-size="11" fill="currentColor" text-anchor="end">{}</text>'
        "</svg>",
        WIDTH,
        "dispatches per interval",
        format_html_join(
            "",
            '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
            bars,
        ),
        LEFT,
        WIDTH - RIGHT,
        LEFT,
        _clock(found.start, zone),
        WIDTH - RIGHT,
        _clock(found.end, zone),
    )
