"""A piece's three writes on a worker, compiled once per process as a run's are
(:mod:`.statements`): the claim, the end, and the look that says whether any piece of the run is
still open.

They run on the worker's own connection (Celery's Django fixup closes Django's around every task:
through the ORM, every piece opened a database connection), with the server binding their
parameters and, on PostgreSQL, prepared:

* the claim — PostgreSQL: one ``UPDATE … FROM run, job … RETURNING`` the piece's, the run's and
  the job's columns; elsewhere the UPDATE (the run's conditions as an ``EXISTS``), then one
  SELECT of the three joined. Every condition of the claim is on the row it writes;
* the end of an attempt that does not go again (success, failed, cancelled): one UPDATE guarded
  on ``running`` at the attempt;
* ``SELECT 1 … LIMIT 1`` on the pieces' (run, status, index) index.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model

from ..dbtime import DbNow
from ..models import (
    CLAIMABLE_PIECE_STATUSES,
    COMPLETION,
    OPEN_PIECE_STATUSES,
    JobDefinition,
    JobPiece,
    JobRun,
    PieceStatus,
    RunStatus,
)
from .cursors import cursor as _cursor
from .cursors import execute as _execute
from .statements import Columns, compiled

__all__ = ["any_open", "claim", "end"]


def _column(model: type[Model], name: str, quote: Any) -> str:
    field = cast("Field[Any, Any]", model._meta.get_field(name))
    return f"{quote(model._meta.db_table)}.{quote(str(field.column))}"


class _PieceStatements:
    """The piece's statements for one connection's vendor."""

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        quote = connection.ops.quote_name
        compiler = JobPiece.objects.none().query.get_compiler(connection=connection)
        now, _ = compiler.compile(DbNow())
        self.piece = Columns(JobPiece, connection)
        self.run = Columns(JobRun, connection)
        self.job = Columns(JobDefinition, connection)
        pieces, runs = quote(JobPiece._meta.db_table), quote(JobRun._meta.db_table)
        jobs = quote(JobDefinition._meta.db_table)

        def p(name: str) -> str:
            return _column(JobPiece, name, quote)

        def r(name: str) -> str:
            return _column(JobRun, name, quote)

        def bare(name: str) -> str:  # a SET clause names the column alone
            return quote(str(cast("Field[Any, Any]", JobPiece._meta.get_field(name)).column))

        sets = ", ".join(
            [
                f"{bare('status')} = %s",
                f"{bare('started_at')} = {now}",
                f"{bare('heartbeat_at')} = {now}",
                f"{bare('worker')} = %s",
                f"{bare('worker_pool')} = %s",
                f"{bare('claim_token')} = %s",
                f"{bare('finished_at')} = NULL",
                f"{bare('duration')} = NULL",
                f"{bare('retry_at')} = NULL",
            ]
        )
        claimable = ", ".join(["%s"] * len(CLAIMABLE_PIECE_STATUSES))
        match = (
            f"{p('run')} = %s AND {p('index')} = %s AND {p('task_id')} = %s"
            f" AND {p('attempt')} = %s AND {p('status')} IN ({claimable})"
        )
        # A piece runs only while its run does and is not asked to stop (its completion after).
        running = f"{r('status')} = %s AND {r('cancel_requested_at')} IS NULL"
        job_pk = _column(JobDefinition, "id", quote)
        self.vendor = connection.vendor
        self.claim_sql: dict[bool, str] = {}
        for completion in (False, True):
            if self.vendor == "postgresql":
                self.claim_sql[completion] = (
                    f"UPDATE {pieces} SET {sets} FROM {runs}, {jobs} WHERE {match}"
                    f" AND {r('id')} = {p('run')} AND {job_pk} = {r('job')}"
                    + ("" if completion else f" AND {running}")
                    + f" RETURNING {self.piece.sql}, {self.run.sql}, {self.job.sql}"
                )
            else:
                alive = (
                    f" AND EXISTS (SELECT 1 FROM {runs} WHERE {r('id')} = {p('run')} AND {running})"
                )
                self.claim_sql[completion] = f"UPDATE {pieces} SET {sets} WHERE {match}" + (
                    "" if completion else alive
                )
        self.select_sql = (
            f"SELECT {self.piece.sql}, {self.run.sql}, {self.job.sql} FROM {pieces}"
            f" INNER JOIN {runs} ON ({r('id')} = {p('run')})"
            f" INNER JOIN {jobs} ON ({job_pk} = {r('job')})"
            f" WHERE {p('run')} = %s AND {p('index')} = %s"
        )
        self.end_sql = (
            f"UPDATE {pieces} SET {bare('status')} = %s, {bare('finished_at')} = {now},"
            f" {bare('duration')} = %s, {bare('result')} = %s, {bare('error')} = %s,"
            f" {bare('traceback')} = %s"
            f" WHERE {p('id')} = %s AND {p('attempt')} = %s AND {p('status')} = %s"
        )
        opened = ", ".join(["%s"] * len(OPEN_PIECE_STATUSES))
        self.open_sql = (
            f"SELECT 1 FROM {pieces} WHERE {p('run')} = %s AND {p('status')} IN ({opened}) LIMIT 1"
        )
        self.duration = cast("Field[Any, Any]", JobPiece._meta.get_field("duration"))

    def build(self, row: Any, connection: BaseDatabaseWrapper) -> JobPiece:
        first = len(self.piece.fields)
        second = first + len(self.run.fields)
        piece: JobPiece = self.piece.build(row[:first], connection)
        run = self.run.build(row[first:second], connection)
        job = self.job.build(row[second:], connection)
        JobRun._meta.get_field("job").set_cached_value(run, job)  # type: ignore[union-attr]
        JobPiece._meta.get_field("run").set_cached_value(piece, run)  # type: ignore[union-attr]
        return piece


_found: dict[tuple[str, str], _PieceStatements] = {}


def _for() -> tuple[BaseDatabaseWrapper, _PieceStatements]:
    return compiled(_found, _PieceStatements)


def claim(
    run_id: int, index: int, task_id: str, attempt: int, worker: str, token: str, pool: str
) -> JobPiece | None:
    """Take the piece for this delivery if it is still claimable at this attempt (one delivery
    can win); the piece with its run and job, or None."""
    connection, found = _for()
    completion = index == COMPLETION
    sql = found.claim_sql[completion]
    params: list[Any] = [str(PieceStatus.RUNNING), worker[:255], pool[:32], token]
    params += [run_id, index, task_id, attempt, *(str(s) for s in CLAIMABLE_PIECE_STATUSES)]
    if not completion:
        params.append(str(RunStatus.RUNNING))
    with _cursor(connection, sql) as cursor:
        _execute(cursor, sql, params)
        if found.vendor != "postgresql":
            if cursor.rowcount != 1:
                return None
            _execute(cursor, found.select_sql, [run_id, index])
        row = cursor.fetchone()
    return None if row is None else found.build(row, connection)


def end(
    piece: JobPiece,
    status: str,
    *,
    duration: timedelta,
    result: str = "",
    error: str = "",
    trace: str = "",
) -> bool:
    """``running`` → ``status`` (success, failed or cancelled) at the piece's attempt: whether
    it was written."""
    connection, found = _for()
    sql = found.end_sql
    params = [
        str(status),
        found.duration.get_db_prep_save(duration, connection),
        result,
        error,
        trace,
        piece.pk,
        piece.attempt,
        str(PieceStatus.RUNNING),
    ]
    with _cursor(connection, sql) as cursor:
        _execute(cursor, sql, params)
        return int(cursor.rowcount) == 1


def any_open(run_id: int) -> bool:
    """Whether any piece of the run is open (pending, queued, running or retrying)."""
    connection, found = _for()
    sql = found.open_sql
    with _cursor(connection, sql) as cursor:
        _execute(cursor, sql, [run_id, *(str(s) for s in OPEN_PIECE_STATUSES)])
        return cursor.fetchone() is not None
