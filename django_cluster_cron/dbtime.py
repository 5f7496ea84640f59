"""The database server's clock: the one clock the cluster agrees on (guarantee G7,
docs/explanation/guarantees.md).

Hosts drift — a VM resumed from suspend, a container without NTP — but every scheduler and
worker talks to the same database. So what is due, how late a run is and whether a worker still
beats are all decided in database time:

* :class:`DbNow` is the database's current time inside a statement (``UPDATE … SET
  heartbeat_at = <db now>``): writes that other hosts compare with slots use it.
* :func:`database_now` reads it in a query of its own (for the rare write that must know the
  value, such as a job's watermark when it is saved).
* The scheduler learns its host's offset from the time its idle query returns and keeps using
  the host clock plus that offset (:class:`django_cluster_cron.core.clock.OffsetClock`).

SQLite is one host, and its ``'now'`` is that host's clock.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from django.db import connections
from django.db.models.functions import Now
from django.utils import timezone as dj_timezone
from django.utils.dateparse import parse_datetime

_SELECT_NOW = {
    "postgresql": "SELECT STATEMENT_TIMESTAMP()",
    # Django stores naive UTC in MySQL/MariaDB; CURRENT_TIMESTAMP would follow the session's
    # time zone.
    "mysql": "SELECT UTC_TIMESTAMP(6)",
    "sqlite": "SELECT STRFTIME('%Y-%m-%d %H:%M:%f', 'now')",
}


class DbNow(Now):
    """The database server's current time, in UTC on every backend Django supports here."""

    def as_mysql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra_context)


def database_now(using: str = "default") -> datetime:
    """The database server's current time as an aware UTC datetime (one query)."""
    connection = connections[using]
    sql = _SELECT_NOW.get(connection.vendor)
    if sql is None:  # a backend we do not test on: its host clock is the best we know
        return dj_timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(sql)
        row = cursor.fetchone()
    return as_utc(row[0])


def as_utc(value: object) -> datetime:
    """A database timestamp (aware, naive UTC, or SQLite's text) as an aware UTC datetime."""
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"not a timestamp: {value!r}")
        value = parsed
    if not isinstance(value, datetime):
        raise TypeError(f"not a timestamp: {value!r}")
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)
