"""A thread's own database connection, kept open for the thread's life.

Django hands each thread one connection per database alias, and others close it: Celery's Django
fixup closes every connection of the worker's thread before and after each task (whatever
``CONN_MAX_AGE`` says), and ``CONN_MAX_AGE = 0`` closes it after each request. Statements that
run again and again from one thread — a lease renewed every few seconds, a worker's claim and
record of each run — would then pay for a new connection every time. This module makes one
connection per thread and alias with Django's own connection handler (the same settings, the
same test database), outside the handler, so nothing else closes it; in autocommit, so it is
never inside a caller's transaction. A caller that sees a database error closes it
(:func:`close_own_connection`) and the next use reconnects. These connections bound how long
they wait on a silent link (:data:`TIMEOUT_OPTIONS`), whatever the project's ``DATABASES`` say.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from typing import Any

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, Func


class _Own(threading.local):
    def __init__(self) -> None:
        self.wrappers: dict[str, BaseDatabaseWrapper] = {}


_own = _Own()


# What the app's own connections wait for at most, on a link that went silent (packets lost, no
# reset): connecting, and a statement whose answer never comes. Without them a process blocked on
# such a socket stays blocked until the kernel gives up, which takes many minutes.
CONNECT_TIMEOUT = 5  # seconds
SILENT_LINK_TIMEOUT = 10  # seconds
# Per database vendor: the driver options that bound those waits. PostgreSQL (libpq): TCP
# keepalive probes from 5 s of silence, 2 s apart, 3 unanswered ones end the connection, and
# unacknowledged data is given up after SILENT_LINK_TIMEOUT. MySQL/MariaDB (mysqlclient): read and
# write timeouts. A value the project sets in OPTIONS is kept.
TIMEOUT_OPTIONS: dict[str, dict[str, int]] = {
    "postgresql": {
        "connect_timeout": CONNECT_TIMEOUT,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": SILENT_LINK_TIMEOUT * 1000,
    },
    "mysql": {
        "connect_timeout": CONNECT_TIMEOUT,
        "read_timeout": SILENT_LINK_TIMEOUT,
        "write_timeout": SILENT_LINK_TIMEOUT,
    },
}


# What the database server does with a session of ours whose client went silent in the middle of
# a transaction: end it after SILENT_LINK_TIMEOUT, so that its row locks (the leader row's, which
# a new leader's epoch bump waits for) do not outlive the link for hours. PostgreSQL
# (idle_in_transaction_session_timeout, milliseconds) and MariaDB (idle_transaction_timeout,
# seconds); MySQL has no such setting.
def bound_server_waits(wrapper: BaseDatabaseWrapper) -> None:
    """Ask the server to end this session if it sits in a transaction, waiting for a client
    that sends nothing, for more than SILENT_LINK_TIMEOUT. A server that refuses is left as is."""
    if wrapper.vendor == "postgresql":
        statement = f"SET idle_in_transaction_session_timeout = {SILENT_LINK_TIMEOUT * 1000}"
    elif wrapper.vendor == "mysql" and getattr(wrapper, "mysql_is_mariadb", False):
        statement = f"SET SESSION idle_transaction_timeout = {SILENT_LINK_TIMEOUT}"
    else:
        return
    with contextlib.suppress(DatabaseError), wrapper.cursor() as cursor:
        cursor.execute(statement)


def _on_connection_created(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    bound_server_waits(connection)


def bound_server_waits_of_this_process() -> None:
    """Every connection this process opens from now on gets :func:`bound_server_waits`
    (``run_scheduler``: the leader's fenced transactions hold the leader row's lock)."""
    from django.db.backends.signals import connection_created

    connection_created.connect(_on_connection_created, dispatch_uid="cluster_cron_server_waits")
    for wrapper in connections.all(initialized_only=True):
        if wrapper.connection is not None:  # opened before (the migrations check)
            bound_server_waits(wrapper)


def with_timeouts(settings_dict: dict[str, Any], vendor: str) -> dict[str, Any]:
    """A copy of a DATABASES entry with the options of ``TIMEOUT_OPTIONS`` it does not set."""
    found = copy.deepcopy(settings_dict)
    options = found.setdefault("OPTIONS", {})
    for name, value in TIMEOUT_OPTIONS.get(vendor, {}).items():
        options.setdefault(name, value)
    return found


def unshared_connection(alias: str) -> BaseDatabaseWrapper:
    """A new connection to ``alias`` (not yet opened) that no other code hands out, with bounded
    waits on a silent link (``TIMEOUT_OPTIONS``); the caller closes it."""
    wrapper = connections.create_connection(alias)
    # Its own copy of the settings: the ORM's connections share the original.
    wrapper.settings_dict = with_timeouts(wrapper.settings_dict, wrapper.vendor)
    return wrapper


def own_connection(alias: str) -> BaseDatabaseWrapper:
    """This thread's own connection to ``alias``, connected and in autocommit, with bounded
    waits on a silent link (``TIMEOUT_OPTIONS``)."""
    wrapper = _own.wrappers.get(alias)
    if wrapper is None:
        wrapper = _own.wrappers[alias] = unshared_connection(alias)
    if wrapper.connection is None:
        wrapper.ensure_connection()
    if not wrapper.autocommit:
        wrapper.set_autocommit(True)
    return wrapper


def own_wrapper(alias: str) -> BaseDatabaseWrapper | None:
    """This thread's own connection to ``alias`` if it has made one (not connecting)."""
    return _own.wrappers.get(alias)


def close_own_connection(alias: str | None = None) -> None:
    """Close this thread's own connection to ``alias`` (every alias: None); harmless if none."""
    aliases = list(_own.wrappers) if alias is None else [alias]
    for name in aliases:
        wrapper = _own.wrappers.pop(name, None)
        if wrapper is not None:
            with contextlib.suppress(DatabaseError):
                wrapper.close()


def forget_inherited() -> None:
    """In a process just forked: drop (without closing: the parent's socket) what the parent's
    thread had made."""
    _own.wrappers = {}


# -- a server that answers but no longer takes writes ------------------------------------------
#
# After a failover the old primary often keeps answering, demoted to a read-only standby: its
# sessions stay open and every read works, so nothing that only reads notices. A write fails
# with one of these, and the connection is then as good as dead: it is closed, and the next one
# is made to whatever the address names now.

READ_ONLY_SQLSTATE = "25006"  # PostgreSQL: read_only_sql_transaction
# MySQL/MariaDB: --read-only (ER_OPTION_PREVENTS_STATEMENT), read-only mode, a read-only
# transaction.
READ_ONLY_MYSQL_ERRORS = frozenset({1290, 1836, 1792})


class ReadOnlyServer(DatabaseError):
    """The database server this connection reaches refuses writes (a demoted primary, a hot
    standby): found by a query that asks, before any write failed."""


def read_only_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) says the server refuses writes."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ReadOnlyServer):
            return True
        code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
        if code == READ_ONLY_SQLSTATE:
            return True
        args = getattr(exc, "args", ())
        first = args[0] if args else None
        if (
            isinstance(first, int)
            and first in READ_ONLY_MYSQL_ERRORS
            and type(exc).__module__.startswith(("MySQLdb", "django.db"))
        ):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


# Per vendor: a boolean expression, true where the server answering refuses writes.
_READ_ONLY_SQL = {
    "postgresql": "(current_setting('transaction_read_only') = 'on')",
    "mysql": "(@@global.read_only <> 0)",
}


def check_writable(wrapper: BaseDatabaseWrapper) -> None:
    """Raise :class:`ReadOnlyServer` if the server ``wrapper`` reaches refuses writes (one
    query; it also proves the server answers)."""
    sql = _READ_ONLY_SQL.get(wrapper.vendor, "(1 = 0)")
    with wrapper.cursor() as cursor:
        cursor.execute(f"SELECT {sql}")
        row = cursor.fetchone()
    if row is not None and row[0]:
        raise ReadOnlyServer(f"the database server refuses writes ({wrapper.vendor}: read-only)")


class ServerReadOnly(Func):
    """Whether the server answering the statement refuses writes, as a column of a query the
    caller makes anyway (no extra round trip): PostgreSQL's ``transaction_read_only`` (on in a
    hot standby and where ``default_transaction_read_only`` demotes a primary), MySQL's and
    MariaDB's ``read_only``; SQLite never is."""

    output_field = BooleanField()
    template = "(1 = 0)"

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return _READ_ONLY_SQL["postgresql"], []

    def as_mysql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return _READ_ONLY_SQL["mysql"], []


# -- which server answers ----------------------------------------------------------------------
#
# A failover puts another server behind the same address. What tells one server (or one life of
# it) from another, per vendor: PostgreSQL's cluster identifier (shared by a primary and the
# standbys made from it), its timeline (a promote starts a new one) and when the postmaster
# started; MySQL's/MariaDB's host, port and server id. SQLite has one file: no identity.

_IDENTITY_SQL = {
    "postgresql": (
        "SELECT (SELECT system_identifier FROM pg_control_system())::text || '/' || "
        "CASE WHEN pg_is_in_recovery() THEN 'recovering' "
        "ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END || '/' || "
        "pg_postmaster_start_time()::text"
    ),
    "mysql": "SELECT CONCAT(@@hostname, ':', @@port, '/', @@server_id)",
}


def server_identity(wrapper: BaseDatabaseWrapper) -> str:
    """Which server (and which life of it) ``wrapper``'s connection reaches; read once per
    connection (a connection reaches one server), "" where the vendor has none or the server
    does not say."""
    raw = wrapper.connection
    cached = getattr(wrapper, "_cluster_cron_identity", None)
    if raw is not None and cached is not None and cached[0] == id(raw):
        return str(cached[1])
    sql = _IDENTITY_SQL.get(wrapper.vendor)
    if sql is None or wrapper.in_atomic_block:  # none, or not now: a failed read would end it
        return ""
    try:
        with wrapper.cursor() as cursor:
            cursor.execute(sql)
            row = cursor.fetchone()
    except DatabaseError:
        return ""
    identity = "" if row is None or row[0] is None else str(row[0])
    wrapper._cluster_cron_identity = (id(wrapper.connection), identity)  # type: ignore[attr-defined]
    return identity


# -- a transaction-mode pooler between the app and PostgreSQL ----------------------------------
#
# PgBouncer (and its kin) in transaction mode lend a server connection to a client for one
# transaction only. Whatever lives in a session then belongs to whichever client the pooler lends
# the connection to next: the lease's session witness (an advisory lock) and the change channel
# (LISTEN). Two connections of one process that each ask the server for its backend's pid, one
# after the other, get the same pid only through such a pooler (it lends the connection the first
# just gave back): without one, two open connections are two server sessions.

POOLER_ROUNDS = 3
_pooled: dict[str, bool] = {}


def behind_transaction_pooler(alias: str) -> bool:
    """Whether ``alias`` reaches PostgreSQL through a transaction-mode pooler (probed once per
    process with two short connections of its own; False elsewhere, or if it cannot tell)."""
    found = _pooled.get(alias)
    if found is not None:
        return found
    if connections[alias].vendor != "postgresql":
        return False
    pair: list[BaseDatabaseWrapper] = []
    found = False
    try:
        pair.extend(unshared_connection(alias) for _ in range(2))
        for _ in range(POOLER_ROUNDS):
            pids = []
            for wrapper in pair:
                with wrapper.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    row = cursor.fetchone()
                pids.append(None if row is None else row[0])
            if pids[0] is not None and pids[0] == pids[1]:
                found = True
                break
    except DatabaseError:
        return False  # not now: asked again next time
    finally:
        for wrapper in pair:
            with contextlib.suppress(DatabaseError):
                wrapper.close()
    _pooled[alias] = found
    return found
