"""How many runs the ledger holds, without counting it on a page view.

A ledger of tens of millions of rows is never counted whole: :func:`estimated_total` reads the
database's own statistics (PostgreSQL's ``pg_class.reltuples``, MySQL's and MariaDB's
``information_schema.TABLES.TABLE_ROWS``; SQLite has none kept up to date, so the span of the
ids, which only grow), and :func:`status_counts` counts each status up to a cap through the
(status, slot) index. The leader measures both after each pruning pass and puts them in its node
report; pages read the report (``ops.status.ledger_counts``), so what they show is at most a
pass old. Where no leader reports (a site whose schedulers are stopped), a page view starts the
same measurement on a thread and keeps it in Django's cache for a minute.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connection
from django.db.models import Max, Min

from ..models import JobRun, RunStatus

__all__ = ["CAP", "estimated_total", "measure", "status_counts"]

# Each status is counted up to this many runs; past it a page says "100,000+".
CAP = 100_000


def estimated_total() -> int | None:
    """About how many runs the ledger holds (None: the database has no figure yet)."""
    table = JobRun._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [table]
            )
            row = cursor.fetchone()
            # -1 (PostgreSQL 14+) or 0 before the table was first analyzed or vacuumed.
            return int(row[0]) if row and row[0] is not None and row[0] > 0 else None
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT TABLE_ROWS FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
                [table],
            )
            row = cursor.fetchone()
            return int(row[0]) if row and row[0] is not None else None
    span = JobRun.objects.aggregate(first=Min("pk"), last=Max("pk"))
    if span["first"] is None:
        return 0
    return int(span["last"]) - int(span["first"]) + 1


def status_counts(cap: int = CAP) -> dict[str, int]:
    """Runs of each status, each counted up to ``cap + 1`` (more than ``cap``: at least that
    many). Statuses without a run are left out."""
    counts = {}
    for status in RunStatus.values:
        found = JobRun.objects.filter(status=status).order_by().values("pk")[: cap + 1].count()
        if found:
            counts[status] = int(found)
    return counts


def measure(cap: int = CAP) -> dict[str, Any]:
    """What the leader reports of the ledger: ``{"total", "by_status", "cap", "at"}`` (``at``:
    when, in seconds since the epoch)."""
    return {
        "total": estimated_total(),
        "by_status": status_counts(cap),
        "cap": cap,
        "at": time.time(),
    }
