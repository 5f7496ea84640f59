"""The cursors the worker's statements run on (:mod:`.statements`), and preparing them.

On PostgreSQL (psycopg 3) the claim and the record go with their parameters bound by the
server, and on a worker's own connection as prepared statements that the connection keeps a
cursor for; a transaction-mode pooler that loses prepared statements turns preparing off for
the process (``run.prepared_statements_off``, logged once). Elsewhere, Django's own cursor.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

logger = logging.getLogger("django_cluster_cron.worker")

psycopg: Any
try:  # psycopg 3: the statements can be prepared (Django also runs on psycopg2)
    psycopg = importlib.import_module("psycopg")
except ImportError:  # pragma: no cover - psycopg2 or another backend only
    psycopg = None


# Set in Celery worker processes (django_cluster_cron.tasks): the claim and the record run on a
# connection of the thread's own (django_cluster_cron.dbconn), which Celery's Django fixup does
# not close around each task. Elsewhere (tests, run_due in a project's tests) they run on the
# ORM's connection, inside whatever transaction the caller holds.
_own_connection = [False]


def use_own_connection(on: bool = True) -> bool:
    """Run the claim and the record on the thread's own connection (a worker process); returns
    what was in use before, for a caller that sets it for a while."""
    previous, _own_connection[0] = _own_connection[0], on
    return previous


# PostgreSQL error codes a transaction-mode pooler gives for prepared statements: the statement
# was prepared on another server connection, or another client's copy is there already.
POOLER_CODES = frozenset({"26000", "42P05"})
# Prepare the statements on a worker's own connection (off for good once a pooler refuses).
_prepare = [True]


def cursor(connection: BaseDatabaseWrapper, sql: str) -> Any:
    """Django's cursor for the statements; on psycopg 3 one that has the server bind the
    parameters (what a prepared statement needs), wrapped like Django's own cursors (errors
    translated, queries logged when Django logs them), to use in a ``with`` block for ``sql``.
    On a worker's own connection psycopg prepares each statement the first time it runs (see
    the module), and the cursor is the one kept for ``sql`` on that connection (the block does
    not close it)."""
    if connection.vendor != "postgresql" or psycopg is None:
        return connection.cursor()
    connection.ensure_connection()
    raw = connection.connection
    if not isinstance(raw, psycopg.Connection):  # psycopg2: Django's cursor
        return connection.cursor()
    if not _own_connection[0]:
        connection.validate_thread_sharing()
        return _wrapped_cursor(connection, raw)
    raw.prepare_threshold = 0 if _prepare[0] else None
    # The thread's own connection keeps a cursor for each statement while it lives: making one
    # for each execution (its adapters and loaders) was a noticeable part of a run's cost, and
    # a cursor that runs the same statement again keeps what it set up for it.
    logged = connection.queries_logged
    if _kept.raw is not raw or _kept.logged != logged or raw.closed:
        _kept.raw, _kept.logged, _kept.cursors = raw, logged, {}
    cursor = _kept.cursors.get(sql)
    if cursor is None:
        cursor = _kept.cursors[sql] = _wrapped_cursor(connection, raw)
    return contextlib.nullcontext(cursor)


def _wrapped_cursor(connection: BaseDatabaseWrapper, raw: Any) -> Any:
    cursor = psycopg.Cursor(raw)
    _compiled_timestamps(cursor, connection)
    if connection.queries_logged:
        return connection.make_debug_cursor(cursor)
    return connection.make_cursor(cursor)


def _compiled_timestamps(cursor: Any, connection: BaseDatabaseWrapper) -> None:
    """Have ``cursor`` read ``timestamptz`` columns with psycopg's own loader where that gives
    what Django's gives. Django registers a loader written in Python (it sets the connection's
    time zone on each value), and reading a claimed run's and job's dozen timestamps with it was
    a noticeable part of the claim. psycopg's compiled loader returns the same values in the
    session's time zone, which is the one Django set; a sample checks that, and where it differs
    (``USE_TZ = False``, another time zone) the cursor keeps Django's loader."""
    from psycopg.pq import Format
    from psycopg.types.datetime import TimestamptzLoader

    oid = psycopg.postgres.types["timestamptz"].oid
    djangos = cursor.adapters.get_loader(oid, Format.TEXT)
    cursor.adapters.register_loader(oid, TimestamptzLoader)
    loaded = cursor.adapters.get_loader(oid, Format.TEXT)(oid, cursor).load(_SAMPLE[0])
    expected = connection.timezone  # None under USE_TZ = False: Django's values are naive
    if expected is None or loaded != _SAMPLE[1] or loaded.tzinfo is not expected:
        cursor.adapters.register_loader(oid, djangos)


_SAMPLE = (
    b"2000-01-02 03:04:05.678901+00",
    datetime.datetime(2000, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.timezone.utc),
)


class _Kept(threading.local):
    """The cursors kept for a thread's own connection (see :func:`_cursor`)."""

    def __init__(self) -> None:
        self.raw: Any = None
        self.logged = False
        self.cursors: dict[str, Any] = {}


_kept = _Kept()


def execute(cursor: Any, sql: str, params: Sequence[Any]) -> None:
    """Execute on a cursor from :func:`_cursor`; under a pooler that loses prepared statements,
    turn preparing off for this process and execute again (see the module)."""
    try:
        cursor.execute(sql, params)
    except DatabaseError as exc:
        raw = getattr(getattr(cursor, "cursor", None), "connection", None)
        if getattr(exc.__cause__, "sqlstate", None) not in POOLER_CODES or raw is None:
            raise
        _prepare[0] = False
        raw.prepare_threshold = None
        logger.warning(
            "run.prepared_statements_off error=%s: a connection pooler does not keep prepared "
            "statements; this process runs the claim and the record unprepared from now on",
            exc,
        )
        cursor.execute(sql, params)


def own_connection_in_use() -> bool:
    """Whether the statements run on the thread's own connection (a worker process)."""
    return _own_connection[0]
