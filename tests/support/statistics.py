"""Bringing a database's statistics up to date after a test's bulk insert: a planner that still
thinks a table empty chooses plans (and estimates) no real ledger would get."""

from __future__ import annotations

from django.db import connection


def analyze(table: str, *, vacuum: bool = False) -> None:
    """ANALYZE ``table`` (with ``vacuum``, on PostgreSQL VACUUM ANALYZE: after a bulk fill its
    visibility map lets index-only scans skip the heap)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"{'VACUUM ' if vacuum else ''}ANALYZE {table}")
        elif connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {table}")
            cursor.fetchall()
        else:
            cursor.execute("ANALYZE")
