"""The session witness: whether the leader's connection to the database still exists.

The database lease's row says who leads and until when; it cannot say whether the holder is
still there. A leader killed, cut off by a reset link or gone with its host leaves a row that
looks held for up to a whole TTL. The database server knows sooner: it ends the holder's
session as soon as the connection is reset or closed.

So the holder of the leader lease also holds a session-level lock on its lease connection, named
after the lease and its own owner token (:func:`name_of`): a PostgreSQL advisory lock, or a
MySQL/MariaDB named lock (``GET_LOCK``). The server frees it
when that session ends. A standby that finds the row held by another token and the lock free
takes the row over at once (the epoch moves on, as with any new holder) instead of waiting for
the TTL to run out.

The lock never decides anything on its own: the row, its token and the epoch do, as before (a
stale leader's writes are fenced out whatever the lock says). When the lock says nothing useful,
failover falls back to the TTL:

* a holder that could not take it (an older version of the app) leaves it free, and is replaced
  at once by a standby of this version;
* through a transaction-mode pooler (PgBouncer), found once per process
  (:func:`~django_cluster_cron.dbconn.behind_transaction_pooler`), no witness is taken or read:
  the lock would sit on a server connection the pooler lends to others;
* a *silent* link (packets lost, nothing reset) keeps the holder's session alive on the server
  until the server's own keepalive gives up. On PostgreSQL the lease connection asks the server to
  probe it soon and often (:data:`SERVER_KEEPALIVE`); MySQL has no such setting per session.

SQLite has no sessions across processes: there is no witness, failover waits for the TTL. A
server that refuses these statements (a database that only speaks PostgreSQL's protocol, a user
without the right) gets no witness either: the lease works as before, failover at the TTL
(``lease.witness_unavailable``, logged once).
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from ..dbconn import behind_transaction_pooler

logger = logging.getLogger("django_cluster_cron.leases")
T = TypeVar("T")
_reported: list[str] = []

# PostgreSQL advisory locks take two 32-bit keys: this app's, and the witness name's.
_APP_KEY = zlib.crc32(b"django_cluster_cron") & 0x7FFFFFFF
# The server-side keepalive of the lease connection on PostgreSQL: probe an idle connection
# after 2 s, every second, and drop it after 3 unanswered probes (about 5 s after the link
# went silent, instead of the server's default of hours).
SERVER_KEEPALIVE = {
    "tcp_keepalives_idle": 2,
    "tcp_keepalives_interval": 1,
    "tcp_keepalives_count": 3,
}

_PG_HELD = """
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 2
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND classid = %s::oid AND objid = %s::oid
"""


def name_of(lease: str, token: str) -> str:
    """The witness of one holder (``token``) of ``lease``: a standby reads the holder's
    token from the row and looks for that holder's witness only, so two leases in one session
    (tests) or a holder that lost the row never speak for each other."""
    return f"{lease}\0{token}"


def supported(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection``'s sessions can hold a witness: PostgreSQL and MySQL/MariaDB, but
    not through a transaction-mode pooler (the lock would stay on a server connection the pooler
    lends to others, and go with it)."""
    if connection.vendor not in ("postgresql", "mysql"):
        return False
    if behind_transaction_pooler(connection.alias):
        if not _reported:
            _reported.append("pooler")
            logger.warning(
                "lease.witness_unavailable reason=pooler: PostgreSQL is reached through a "
                "transaction-mode pooler, where a session lock cannot witness a connection; "
                "failover waits for the TTL"
            )
        return False
    return True


def _keys(name: str) -> tuple[int, int]:
    return _APP_KEY, zlib.crc32(name.encode()) & 0x7FFFFFFF


def _mysql_name(connection: BaseDatabaseWrapper, name: str) -> str:
    # MySQL lock names are server-wide and at most 64 characters: scope them by database.
    database = str(connection.settings_dict.get("NAME") or "")
    digest = hashlib.sha1(f"{database}\0{name}".encode()).hexdigest()[:40]
    return f"cluster_cron:{digest}"


def _one(connection: BaseDatabaseWrapper, sql: str, params: list[object]) -> object:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return None if row is None else row[0]


def _or(default: T, action: Callable[[], T]) -> T:
    """``action()``, or ``default`` if the server refuses it (a witness is never needed)."""
    try:
        return action()
    except DatabaseError as exc:
        if not _reported:
            _reported.append(repr(exc))
            logger.warning("lease.witness_unavailable error=%s: failover waits for the TTL", exc)
        return default


def hold(connection: BaseDatabaseWrapper, name: str) -> bool:
    """Make this session hold the witness of lease ``name`` (unless it does already); whether it
    holds it now (False: another session does, or the server has no such lock)."""
    return _or(False, lambda: _hold(connection, name))


def is_free(connection: BaseDatabaseWrapper, name: str) -> bool:
    """Whether no session holds the witness of lease ``name``: its holder's session ended
    (False when the server cannot tell)."""
    return _or(False, lambda: _is_free(connection, name))


def let_go(connection: BaseDatabaseWrapper, name: str) -> None:
    """Free the witness of lease ``name`` if this session holds it."""
    _or(None, lambda: _let_go(connection, name))


def _hold(connection: BaseDatabaseWrapper, name: str) -> bool:
    if connection.vendor == "postgresql":
        keys = _keys(name)
        took = _one(
            connection,
            f"SELECT CASE WHEN EXISTS ({_PG_HELD} AND pid = pg_backend_pid()) THEN NULL "
            "ELSE pg_try_advisory_lock(%s::int, %s::int) END",
            [*keys, *keys],
        )
        if took:
            # Newly taken, so this is a new session: ask the server to notice a dead link soon.
            with connection.cursor() as cursor:
                for setting, value in SERVER_KEEPALIVE.items():
                    cursor.execute(f"SET {setting} = {int(value)}")
        return took is None or bool(took)
    if connection.vendor == "mysql":
        lock = _mysql_name(connection, name)
        held = _one(
            connection,
            "SELECT IF(IS_USED_LOCK(%s) <=> CONNECTION_ID(), 1, GET_LOCK(%s, 0))",
            [lock, lock],
        )
        return bool(held)
    return False


def _is_free(connection: BaseDatabaseWrapper, name: str) -> bool:
    if connection.vendor == "postgresql":
        return not _one(connection, f"SELECT EXISTS ({_PG_HELD})", list(_keys(name)))
    if connection.vendor == "mysql":
        return bool(_one(connection, "SELECT IS_FREE_LOCK(%s)", [_mysql_name(connection, name)]))
    return False


def _let_go(connection: BaseDatabaseWrapper, name: str) -> None:
    if connection.vendor == "postgresql":
        keys = _keys(name)
        _one(
            connection,
            f"SELECT CASE WHEN EXISTS ({_PG_HELD} AND pid = pg_backend_pid()) "
            "THEN pg_advisory_unlock(%s::int, %s::int) END",
            [*keys, *keys],
        )
    elif connection.vendor == "mysql":
        lock = _mysql_name(connection, name)
        _one(
            connection,
            "SELECT IF(IS_USED_LOCK(%s) <=> CONNECTION_ID(), RELEASE_LOCK(%s), NULL)",
            [lock, lock],
        )
