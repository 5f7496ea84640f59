"""The worker's two writes per run, compiled once per process: the claim and the final record.

Every run costs a claim (the conditional UPDATE that only one delivery wins, and reading the run
and its job) and a final conditional UPDATE. Through the ORM, building those statements cost
several times what the database spends running them (a run row and a job row have some fifty
columns between them), so they are built here once per database connection's vendor and reused:

* PostgreSQL: the claim is one statement, ``UPDATE … FROM job … RETURNING`` the run's and the
  job's columns.
* MySQL/MariaDB (no ``UPDATE … RETURNING``) and SQLite (whose ``RETURNING`` cannot name the
  joined table): the claim's UPDATE, then one SELECT of the run joined to its job.
* The claim matches only a run that is due (``due_at`` empty or passed, by the database's clock).
* The final record is an UPDATE of the fields the outcome writes, conditional on the run still
  being ``running`` at this attempt, its ``finished_at`` the database's time.
* On PostgreSQL (psycopg 3) both go with their parameters bound by the server, not spliced into
  the text, and on a worker's own connection as prepared statements: PostgreSQL parses and plans
  each once per connection instead of once per run, which halves what it spends on them. Django
  keeps prepared statements off by default for the sake of transaction-mode connection poolers
  (PgBouncer before 1.21), so a worker whose statement disappears or collides under such a
  pooler stops preparing for the rest of its life (``run.prepared_statements_off``, logged
  once) and runs the statement again unprepared; the statements are conditional, so nothing is
  done twice.

Rows become model instances with the ORM's own converters, built as ``from_db`` builds them, so
what a task reads through ``current_run()`` is exactly what a queryset would give (without
``Model.__init__`` setting fields one by one, unless a ``pre_init`` or ``post_init`` receiver
listens for the model). The statements are checked against the ORM's in the test suite.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model
from django.db.models.base import ModelState
from django.db.models.expressions import Col
from django.db.models.signals import post_init, pre_init

from ..dbconn import close_own_connection, own_connection
from ..dbtime import DbNow
from ..models import WAITING_STATUSES, JobDefinition, JobRun, RunStatus
from .cursors import cursor as _cursor
from .cursors import execute as _execute
from .cursors import own_connection_in_use, use_own_connection

__all__ = [
    "CLAIMABLE",
    "claim_run",
    "claimed_by",
    "finish_run",
    "outcome_of",
    "seconds_until_due",
    "use_own_connection",
]

logger = logging.getLogger("django_cluster_cron.worker")

# A delivery can only claim a run that waits for a worker.
CLAIMABLE = WAITING_STATUSES

Converter = Callable[[Any, Any, Any], Any]
T = TypeVar("T")


def _columns(model: type[Model]) -> list[Field[Any, Any]]:
    return list(model._meta.concrete_fields)


def _column_name(field: Field[Any, Any]) -> str:
    if not field.column:  # pragma: no cover - every concrete field has a column
        raise RuntimeError(f"{field} has no column")
    return field.column


_PLAIN_FROM_DB = {getattr(m.from_db, "__func__", None) for m in (Model, JobDefinition)}


class Columns:
    """One model's concrete columns as SQL, and how to turn a row slice into an instance."""

    def __init__(self, model: type[Model], connection: BaseDatabaseWrapper) -> None:
        quote = connection.ops.quote_name
        self.model = model
        self.fields = _columns(model)
        table = quote(model._meta.db_table)
        self.sql = ", ".join(f"{table}.{quote(_column_name(f))}" for f in self.fields)
        self.attnames = [f.attname for f in self.fields]
        # The columns whose values the ORM converts (most come from the driver as they are).
        self.converters: list[tuple[int, Col, list[Converter]]] = []
        for index, field in enumerate(self.fields):
            column = Col(model._meta.db_table, field)
            found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
            if found:
                self.converters.append((index, column, found))
        # from_db is Django's (or JobDefinition's: Django's, then remember_loaded).
        self.plain = getattr(model.from_db, "__func__", None) in _PLAIN_FROM_DB

    def build(self, values: Sequence[Any], connection: BaseDatabaseWrapper) -> Any:
        if len(values) != len(self.fields):  # pragma: no cover - the statement names them all
            raise RuntimeError(f"{len(values)} values for {len(self.fields)} columns")
        converted = list(values)
        for index, column, converters in self.converters:
            value = converted[index]
            for convert in converters:
                value = convert(value, column, connection)
            converted[index] = value
        model = self.model
        if not self.plain or _init_watched(model):
            return model.from_db(connection.alias, self.attnames, converted)
        # What from_db gives, without Model.__init__ setting the fields one by one (a claim
        # builds two instances of 26 and 38 fields): the instance's attributes at once.
        instance = model.__new__(model)
        instance.__dict__.update(zip(self.attnames, converted, strict=True))
        state = instance._state = ModelState()
        state.adding = False
        state.db = connection.alias
        if isinstance(instance, JobDefinition):
            instance.remember_loaded(self.attnames)
        return instance


def _init_watched(model: type[Model]) -> bool:
    """Does a receiver of Django's pre_init or post_init listen for ``model``? (Building an
    instance without ``__init__`` would skip it.)"""
    return pre_init.has_listeners(model) or post_init.has_listeners(model)


class _Statements:
    """The claim and the final record for one database connection (its alias and vendor)."""

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        quote = connection.ops.quote_name
        self.vendor = connection.vendor
        self.run = Columns(JobRun, connection)
        self.job = Columns(JobDefinition, connection)
        compiler = JobRun.objects.none().query.get_compiler(connection=connection)
        now, now_params = compiler.compile(DbNow())
        if now_params:  # pragma: no cover - no backend we support puts parameters in it
            raise RuntimeError("the database's time needs parameters on this backend")
        self.now = now
        run_table = quote(JobRun._meta.db_table)
        job_table = quote(JobDefinition._meta.db_table)
        self.run_table = run_table

        # Field name -> its column, as a SET clause names it, and as a condition names it.
        self.assign = assign = {f.name: quote(_column_name(f)) for f in _columns(JobRun)}

        def column(name: str) -> str:
            return f"{run_table}.{assign[name]}"

        self.column = column
        assignments = ", ".join(
            [
                f"{assign['status']} = %s",
                f"{assign['started_at']} = {now}",
                f"{assign['heartbeat_at']} = {now}",
                f"{assign['worker']} = %s",
                f"{assign['worker_pool']} = %s",
                f"{assign['backend_result_id']} = %s",
                f"{assign['claim_token']} = %s",
                f"{assign['finished_at']} = NULL",
                f"{assign['duration']} = NULL",
                f"{assign['retry_at']} = NULL",
            ]
        )
        # Never before it is due (a run recorded ahead of its time, or jittered).
        match = (
            f"{column('id')} = %s AND {column('task_id')} = %s AND {column('attempt')} = %s"
            f" AND {column('status')} IN ({', '.join(['%s'] * len(CLAIMABLE))})"
            f" AND ({column('due_at')} IS NULL OR {column('due_at')} <= {now})"
        )
        join = quote(_column_name(cast("Field[Any, Any]", JobDefinition._meta.pk)))
        if self.vendor == "postgresql":
            self.claim_sql = (
                f"UPDATE {run_table} SET {assignments} FROM {job_table} WHERE {match}"
                f" AND {job_table}.{join} = {column('job')}"
                f" RETURNING {self.run.sql}, {self.job.sql}"
            )
            self.select_sql = ""
        else:
            self.claim_sql = f"UPDATE {run_table} SET {assignments} WHERE {match}"
            self.select_sql = (
                f"SELECT {self.run.sql}, {self.job.sql} FROM {run_table} INNER JOIN {job_table}"
                f" ON ({job_table}.{join} = {column('job')}) WHERE {column('id')} = %s"
            )
        self.held_sql = (
            f"SELECT 1 FROM {run_table} WHERE {column('job')} = %s AND {column('status')} = %s"
            " LIMIT 1"
        )
        self._finish_sql: dict[tuple[tuple[str, ...], bool], tuple[str, list[Field[Any, Any]]]]
        self._finish_sql = {}
        self._fields = {f.name: f for f in _columns(JobRun)}

    def claim(
        self,
        connection: BaseDatabaseWrapper,
        run_id: int,
        task_id: str,
        attempt: int,
        worker: str,
        result_id: str = "",
        token: str = "",
        pool: str = "",
    ) -> JobRun | None:
        params: list[Any] = [str(RunStatus.RUNNING), worker, pool, result_id, token]
        params += [run_id, task_id, attempt, *(str(status) for status in CLAIMABLE)]
        with _cursor(connection, self.claim_sql) as cursor:
            _execute(cursor, self.claim_sql, params)
            if self.select_sql:
                if cursor.rowcount != 1:
                    return None
                _execute(cursor, self.select_sql, [run_id])
            row = cursor.fetchone()
        if row is None:
            return None
        split = len(self.run.fields)
        run: JobRun = self.run.build(row[:split], connection)
        job = self.job.build(row[split:], connection)
        JobRun._meta.get_field("job").set_cached_value(run, job)  # type: ignore[union-attr]
        return run

    def finish_sql(
        self, names: tuple[str, ...], cancelled: bool = False
    ) -> tuple[str, list[Field[Any, Any]]]:
        """The final record's statement for the fields ``names`` (compiled once per set), and
        those fields in the order of its parameters. Unless it records the run ``cancelled``,
        it also needs no cancel asked for: a cancel that reached the row first wins the race
        with the run's own end (the worker then records it cancelled)."""
        compiled = self._finish_sql.get((names, cancelled))
        if compiled is None:
            fields = [self._fields[name] for name in names]
            assignments = ", ".join(
                [f"{self.assign[name]} = %s" for name in names]
                + [f"{self.assign['finished_at']} = {self.now}"]
            )
            status = self.column("status")
            sql = (
                f"UPDATE {self.run_table} SET {assignments} WHERE {self.column('id')} = %s"
                f" AND {self.column('attempt')} = %s"
            )
            if cancelled:  # a run being terminated ends cancelled too, by its worker if it can
                sql += f" AND {status} IN (%s, %s)"
            else:
                sql += f" AND {status} = %s AND {self.column('cancel_requested_at')} IS NULL"
            compiled = self._finish_sql[names, cancelled] = (sql, fields)
        return compiled

    def finish(
        self,
        connection: BaseDatabaseWrapper,
        run_id: int,
        attempt: int,
        values: Mapping[str, Any],
    ) -> int:
        cancelled = values.get("status") == RunStatus.CANCELLED
        sql, fields = self.finish_sql(tuple(values), cancelled)
        params = [field.get_db_prep_save(values[field.name], connection) for field in fields]
        params += [run_id, attempt, str(RunStatus.RUNNING)]
        if cancelled:
            params.append(str(RunStatus.TERMINATING))
        with _cursor(connection, sql) as cursor:
            _execute(cursor, sql, params)
            return int(cursor.rowcount)


_lock = threading.Lock()
_statements: dict[tuple[str, str], _Statements] = {}


def reset_connection() -> None:
    """After a connection error: close the connection the statements use; the next reconnects."""
    alias = router.db_for_write(JobRun)
    if own_connection_in_use():
        close_own_connection(alias)
    else:
        connections[alias].close()


def worker_connection(using: str | None = None) -> tuple[str, BaseDatabaseWrapper]:
    """The connection the worker's statements run on: the thread's own in a worker process
    (Celery's Django fixup closes Django's around every task), else Django's."""
    alias = using or router.db_for_write(JobRun)
    return alias, own_connection(alias) if own_connection_in_use() else connections[alias]


def compiled(
    cache: dict[tuple[str, str], T], build: Callable[[BaseDatabaseWrapper], T]
) -> tuple[BaseDatabaseWrapper, T]:
    """The worker's connection, and the statements ``build`` compiles for its alias and vendor
    (once per process: kept in ``cache``)."""
    alias, connection = worker_connection()
    key = (alias, connection.vendor)
    found = cache.get(key)
    if found is None:
        with _lock:
            found = cache.get(key) or build(connection)
            cache[key] = found
    return connection, found


def _for() -> tuple[BaseDatabaseWrapper, _Statements]:
    return compiled(_statements, _Statements)


def claim_run(
    run_id: int,
    task_id: str,
    attempt: int,
    worker: str,
    result_id: str = "",
    token: str = "",
    pool: str = "",
) -> JobRun | None:
    """Take the run for this delivery if it is still claimable (one delivery can win): it is
    ``running`` from the database's now, on ``worker`` (whose way of running tasks is ``pool``),
    ``result_id`` the execution backend's id of this attempt's result (empty where it is the
    task id), ``token`` this delivery's own (:func:`claimed_by`). Returns the run with its job,
    or None."""
    connection, statements = _for()
    return statements.claim(connection, run_id, task_id, attempt, worker, result_id, token, pool)


def claimed_by(run_id: int, attempt: int, token: str) -> JobRun | None:
    """The run, with its job, if the delivery holding ``token`` claimed it at ``attempt`` and it
    still runs: a claim whose commit reached the database while its answer was lost (the
    connection broke) is found again by its retry. (Rare: through the ORM.)"""
    mine = JobRun.objects.select_related("job").filter(
        pk=run_id, status=RunStatus.RUNNING, attempt=attempt, claim_token=token
    )
    found: JobRun | None = mine.first()
    return found


def outcome_of(run_id: int, token: str) -> tuple[str, int] | None:
    """The status and attempt of the run the delivery holding ``token`` claimed, or None: what a
    record retried after a lost answer finds if its first try was written. (Rare: the ORM.)"""
    found = JobRun.objects.filter(pk=run_id, claim_token=token).values_list("status", "attempt")
    row = found.first()
    return None if row is None else (str(row[0]), int(row[1]))


def seconds_until_due(run_id: int, task_id: str, attempt: int) -> float | None:
    """How long until this run is due, by the database's clock, if this delivery could still
    claim it: 0 if it is due now (a claim that found it a moment early may go again at once);
    None if it is not claimable by this delivery (another took it, or it is not this attempt's
    message)."""
    from ..dbtime import as_utc

    found = (
        JobRun.objects.filter(pk=run_id, task_id=task_id, attempt=attempt, status__in=CLAIMABLE)
        .annotate(db_now=DbNow())
        .values_list("due_at", "db_now")
        .first()
    )
    if found is None:
        return None
    due, now = found
    if due is None:
        return 0.0
    return max(0.0, (as_utc(due) - as_utc(now)).total_seconds())


def holds_back(job_id: int) -> bool:
    """Whether the job has runs its overlap policy holds back (``buffered``): one indexed
    look-up on the worker's own connection, before a release that costs more."""
    connection, statements = _for()
    with _cursor(connection, statements.held_sql) as cursor:
        _execute(cursor, statements.held_sql, [job_id, str(RunStatus.BUFFERED)])
        return cursor.fetchone() is not None


def finish_run(run_id: int, attempt: int, values: Mapping[str, Any], token: str = "") -> int:
    """Write ``values`` and ``finished_at`` (database time) if the run is still ``running`` at
    ``attempt`` (with no cancel asked for, unless ``values`` record it ``cancelled``; that one
    also ends a run being terminated); the number of rows written (0 or 1). With ``token`` (the
    delivery that claimed it), a write that finds nothing to change but the very outcome it
    writes, under that token, counts as written: its first try committed and only the answer
    was lost."""
    connection, statements = _for()
    written = statements.finish(connection, run_id, attempt, values)
    if written or not token:
        return written
    meant = (str(values.get("status")), int(values.get("attempt", attempt)))
    return 1 if outcome_of(run_id, token) == meant else 0
