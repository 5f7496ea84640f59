"""A worker's heartbeat of its executing runs (and pieces), and the channel that brings a cancel
back.

One statement per beat stamps ``heartbeat_at`` (database time) on every run the process is
executing, matched by id and attempt while it is ``running`` or ``terminating`` — a run that
ended, or that the leader moved on to another attempt elsewhere, is never stamped — and the
same statement says which of them have a cancel asked for:

* PostgreSQL and SQLite (3.35 and later): ``UPDATE … RETURNING`` each stamped run's id, whether
  a cancel is asked for and by whom;
* MariaDB and MySQL (MariaDB 10.11 and MySQL 8 have no ``RETURNING`` on an UPDATE): the UPDATE
  also needs no cancel asked for, so when it stamps every run (the usual beat) nothing more is
  sent; a beat that stamps fewer reads which of its runs have a cancel asked for, and stamps
  those.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from django.db import connections, router
from django.db.models import Model

from ..dbtime import DbNow
from ..models import EXECUTING_STATUSES, JobRun

__all__ = ["stamp"]

# SQLite learned UPDATE … RETURNING in 3.35.
_SQLITE_RETURNING = sqlite3.sqlite_version_info >= (3, 35)


class _Beat:
    """The beat's statements for one database alias (built once)."""

    def __init__(self, using: str, model: type[Model]) -> None:
        connection = connections[using]
        quote = connection.ops.quote_name
        compiler = JobRun.objects.none().query.get_compiler(connection=connection)
        now, _ = compiler.compile(DbNow())
        table = quote(model._meta.db_table)

        def column(name: str) -> str:
            return quote(str(getattr(model._meta.get_field(name), "column", name)))

        executing = ", ".join(f"'{status}'" for status in EXECUTING_STATUSES)
        self.returning = connection.vendor == "postgresql" or (
            connection.vendor == "sqlite" and _SQLITE_RETURNING
        )
        self.update = (
            f"UPDATE {table} SET {column('heartbeat_at')} = {now}"
            f" WHERE {column('status')} IN ({executing})"
        )
        self.pair = f"({column('id')} = %s AND {column('attempt')} = %s)"
        asked, by = column("cancel_requested_at"), column("cancel_requested_by")
        # The column itself, not "IS NOT NULL" on it: SQLite 3.40 answered that wrongly here.
        self.returned = f" RETURNING {column('id')}, {by}, {asked}"
        self.not_cancelled = f" AND {column('cancel_requested_at')} IS NULL"
        self.read = (
            f"SELECT {column('id')}, {by} FROM {table} WHERE {column('status')} IN ({executing})"
            f" AND {asked} IS NOT NULL"
        )

    def match(self, count: int) -> str:
        return f" AND ({' OR '.join([self.pair] * count)})"


_beats: dict[tuple[str, str, str], _Beat] = {}


def _params(runs: Mapping[int, int]) -> list[int]:
    return [value for pair in runs.items() for value in pair]


def stamp(runs: Mapping[int, int], model: type[Model] = JobRun) -> dict[int, str]:
    """Stamp the heartbeat of ``runs`` (run id -> attempt) still executing at that attempt;
    return those whose cancel has been asked for, each with who asked. ``model``: the rows'
    (a run's pieces, :class:`~django_cluster_cron.models.JobPiece`, beat alike)."""
    if not runs:
        return {}
    using = router.db_for_write(JobRun)
    connection = connections[using]
    key = (using, connection.vendor, model._meta.label)
    beat = _beats.get(key)
    if beat is None:
        beat = _beats[key] = _Beat(using, model)
    match, params = beat.match(len(runs)), _params(runs)
    with connection.cursor() as cursor:
        if beat.returning:
            cursor.execute(beat.update + match + beat.returned, params)
            rows = cursor.fetchall()
            return {int(run_id): str(by) for run_id, by, asked in rows if asked is not None}
        cursor.execute(beat.update + match + beat.not_cancelled, params)
        if cursor.rowcount == len(runs):
            return {}
        cursor.execute(beat.read + match, params)
        cancelled = {int(run_id): str(by) for run_id, by in cursor.fetchall()}
        if cancelled:
            asked = {run_id: runs[run_id] for run_id in cancelled}
            cursor.execute(beat.update + beat.match(len(asked)), _params(asked))
    return cancelled
