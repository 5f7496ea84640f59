"""The database lease backend: for teams without Redis.

A lease is one row of ``SchedulerLease`` (``name`` unique): the holder's owner token,
``valid_until`` and the fencing ``epoch`` side by side. Every time in it is the database server's
clock, computed inside the statement (``DbNow``), never a host's. Each operation is one
conditional UPDATE:

* **acquire** matches the row if it is free (no token, no validity, expired) or already ours, and
  sets our token and ``valid_until = now + ttl``; when the owner changes it also bumps ``epoch``
  and stamps ``acquired_at`` — so the scheduler's leadership and its fencing epoch move together,
  in one statement. A row that does not exist yet is inserted first (a conflict means another node
  inserted it: fine).
* **renew** matches only while the row holds our token and has not expired.
* **release** matches only while the row holds our token, and clears token and validity.

No row lock is held longer than one statement, and no advisory lock decides who holds a lease
(they live and die with one connection). The statements run on a connection of the lease's own,
in autocommit: a cluster lock taken inside the caller's ``transaction.atomic()`` is visible to
other hosts at once and is not undone by the caller's rollback.

Early takeover (the ``leader`` lease only, PostgreSQL and MySQL/MariaDB): its holder also holds a
session lock that says whether its connection still exists (:mod:`.witness`). A standby that
finds the row held by another token while that lock is free takes the row over at once, epoch
bumped, instead of waiting for the TTL: the holder was killed or its link reset.

Repairs: a row edited by hand is never trusted into a second holder. An empty token is free. A
``valid_until`` further ahead than the holder's own TTL (``ttl`` is stored with it) can only come
from an edit, so the row counts as expired. The scheduler's fence also compares the token, so an
epoch edited backwards cannot let an old leader's writes through (see the scheduler's store).

MySQL/MariaDB note: a single-table UPDATE there evaluates ``SET`` assignments left to right, each
seeing the ones before. The acquire statement therefore assigns ``epoch`` and ``acquired_at``
(which compare the *old* token) before ``token``. Django keeps the order of ``update()``'s
keyword arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

from django.db import DatabaseError, IntegrityError, connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Case, F, Q, Value, When
from django.db.models.sql.constants import CURSOR
from django.db.models.sql.subqueries import InsertQuery, UpdateQuery

from ..dbconn import close_own_connection, own_connection, own_wrapper, server_identity
from ..dbtime import DbNow, as_utc
from . import witness
from .base import LEADER, HeldLease, LeaseUnavailable, OwnedLease, node_of

__all__ = ["DatabaseBackend", "DatabaseLease"]

logger = logging.getLogger("django_cluster_cron.leases")

T = TypeVar("T")

# A hand-edited validity this far beyond the holder's TTL is not trusted.
TTL_SLACK = timedelta(seconds=1)
SCAN_LIMIT = 500


def _model() -> Any:
    from ..models import SchedulerLease

    return SchedulerLease


def _alias() -> str:
    return router.db_for_write(_model())


@contextmanager
def private_connection(what: str) -> Iterator[BaseDatabaseWrapper]:
    """This thread's own connection to the leases' database, in autocommit.

    Made with Django's connection handler (same settings, same test database) but not the one
    the ORM hands out, so it is never inside the caller's transaction. A database error closes
    it (the next call reconnects) and surfaces as :class:`LeaseUnavailable`.
    """
    try:
        # Kept open across calls whatever CONN_MAX_AGE says (a renewal every few seconds must
        # not reconnect each time); closed on any error, so the next call reconnects.
        yield own_connection(_alias())
    except DatabaseError as exc:
        close_private_connection()
        message = f"database unreachable ({what}): {type(exc).__name__}: {exc}"
        raise LeaseUnavailable(message) from exc


def _refuse_inside_sqlite_write_lock(what: str) -> None:
    """SQLite has one writer. With ``transaction_mode`` IMMEDIATE (or EXCLUSIVE), the thread's
    own transaction holds the write lock from its start, so the lease's connection could only
    wait out the busy timeout and fail: say why at once instead."""
    caller = connections[_alias()]
    if caller.vendor != "sqlite" or not caller.in_atomic_block:
        return
    mode = str(caller.settings_dict.get("OPTIONS", {}).get("transaction_mode") or "").upper()
    if mode in ("IMMEDIATE", "EXCLUSIVE"):
        raise LeaseUnavailable(
            f"{what}: on SQLite with transaction_mode {mode} this thread's transaction holds "
            "the database's only write lock, so the lease's own connection cannot write; "
            "take or release the lease outside transaction.atomic()"
        )


def private_wrapper() -> BaseDatabaseWrapper | None:
    """This thread's lease connection, if it has made one (query counting hooks into it)."""
    return own_wrapper(_alias())


def close_private_connection() -> None:
    """Close this thread's lease connection (threads that end call it; harmless if none)."""
    close_own_connection(_alias())


def _run(what: str, action: Callable[[BaseDatabaseWrapper], T], *, writes: bool = True) -> T:
    """``action`` on this thread's lease connection; database errors as LeaseUnavailable."""
    if writes:
        _refuse_inside_sqlite_write_lock(what)
    with private_connection(what) as connection, connection.wrap_database_errors:
        return action(connection)


def _update(connection: BaseDatabaseWrapper, filters: Q, values: dict[str, Any]) -> int:
    """``Model.objects.filter(filters).update(**values)`` on ``connection``; the row count."""
    query = UpdateQuery(_model())
    query.add_q(filters)
    query.add_update_values(values)
    rows: int = query.get_compiler(connection=connection).execute_sql(CURSOR).rowcount
    return rows


def _select(
    connection: BaseDatabaseWrapper, filters: Q, columns: list[str], **annotations: Any
) -> list[tuple[Any, ...]]:
    queryset = _model().objects.filter(filters).annotate(**annotations).values_list(*columns)
    compiler = queryset.query.get_compiler(connection=connection)
    return [tuple(row) for row in compiler.results_iter()]


def _insert_missing(connection: BaseDatabaseWrapper, name: str) -> None:
    """Create the lease's row if there is none (another node creating it at once is fine)."""
    model = _model()
    row = model(name=name)
    query = InsertQuery(model)
    query.insert_values([f for f in model._meta.concrete_fields if not f.primary_key], [row])
    try:
        with connection.wrap_database_errors:
            query.get_compiler(connection=connection).execute_sql()
    except IntegrityError:
        pass


def free_q(now: Any = None) -> Q:
    """Rows that no live owner holds: no token, no validity, expired, or an edited validity."""
    now = now if now is not None else DbNow()
    return (
        Q(token="")
        | Q(valid_until__isnull=True)
        | Q(valid_until__lte=now)
        | Q(ttl__isnull=True)
        | Q(valid_until__gt=now + F("ttl") + Value(TTL_SLACK))
    )


def live_q(now: Any = None) -> Q:
    now = now if now is not None else DbNow()
    return ~Q(token="") & Q(
        valid_until__gt=now, ttl__isnull=False, valid_until__lte=now + F("ttl") + Value(TTL_SLACK)
    )


class DatabaseLease(OwnedLease):
    """A lease on one ``SchedulerLease`` row, owned by one process through a fresh token."""

    def __init__(self, name: str, node_id: str, ttl: float) -> None:
        super().__init__(name, node_id, ttl)
        # Leadership is taken over early from a holder whose session ended (see the module doc).
        self.witnessed = name == LEADER
        # Told the row's epoch, last write and the server answering, each time an attempt to
        # take the lease finds it held (the scheduler keeps the furthest it saw).
        self.seen: Callable[[int, int, Any, str], object] | None = None

    def _run(
        self, what: str, action: Callable[[BaseDatabaseWrapper], T], *, writes: bool = True
    ) -> T:
        return _run(f"{what} lease {self.name!r}", action, writes=writes)

    def try_acquire(self) -> bool:
        ttl = timedelta(seconds=self.ttl)
        ours = Q(token=self.token)

        def acquire(connection: BaseDatabaseWrapper) -> bool:
            target = Q(name=self.name) & (ours | free_q())
            # Order matters on MySQL (see the module doc): the CASEs read the old token.
            values = {
                "epoch": Case(When(ours, then=F("epoch")), default=F("epoch") + 1),
                "acquired_at": Case(When(ours, then=F("acquired_at")), default=DbNow()),
                "holder": self.node_id,
                "valid_until": DbNow() + Value(ttl),
                "ttl": ttl,
                "token": self.token,
            }
            if _update(connection, target, values):
                return self._held(connection)
            rows = _select(
                connection, Q(name=self.name), ["token", "epoch", "writes", "last_write_at"]
            )
            if not rows:
                _insert_missing(connection, self.name)
                return bool(_update(connection, target, values)) and self._held(connection)
            holder, epoch, writes, last_write_at = rows[0]
            holder = str(holder)
            if self.seen is not None:
                written = None if last_write_at is None else as_utc(last_write_at)
                self.seen(int(epoch), int(writes), written, server_identity(connection))
            if not (self.witnessed and witness.supported(connection)):
                return False
            if not witness.is_free(connection, witness.name_of(self.name, holder)):
                return False
            # The row is held, but no session holds its witness: the holder's connection ended.
            if not _update(connection, Q(name=self.name, token=holder), values):
                return False  # another standby was first, or the holder renewed meanwhile
            logger.info(
                "lease.taken_over name=%s from=%s node=%s: the holder's database session ended",
                self.name,
                node_of(holder),
                self.node_id,
            )
            return self._held(connection)

        return self._run("acquiring", acquire)

    def _held(self, connection: BaseDatabaseWrapper) -> bool:
        """The row is ours: hold its witness too (when it has one). Always True."""
        if self.witnessed and witness.supported(connection):
            witness.hold(connection, witness.name_of(self.name, self.token))
        return True

    def _let_go(self, connection: BaseDatabaseWrapper) -> None:
        if self.witnessed and witness.supported(connection):
            witness.let_go(connection, witness.name_of(self.name, self.token))

    def renew(self, ttl: float | None = None) -> bool:
        seconds = self.ttl if ttl is None else ttl
        if seconds <= 0:
            return self.release()
        delta = timedelta(seconds=seconds)
        mine = Q(name=self.name, token=self.token) & live_q()

        def renew(connection: BaseDatabaseWrapper) -> bool:
            values = {"valid_until": DbNow() + Value(delta), "ttl": max(delta, self._ttl)}
            if _update(connection, mine, values):
                # Held again if this is a new connection (the last one failed and was closed).
                return self._held(connection)
            self._let_go(connection)
            return False

        return self._run("renewing", renew)

    @property
    def _ttl(self) -> timedelta:
        return timedelta(seconds=self.ttl)

    def release(self) -> bool:
        mine = Q(name=self.name, token=self.token)

        def release(connection: BaseDatabaseWrapper) -> bool:
            freed = bool(_update(connection, mine, {"valid_until": None, "token": ""}))
            self._let_go(connection)
            return freed

        return self._run("releasing", release)

    def holder(self) -> str | None:
        rows = self._run(
            "reading", lambda c: _select(c, Q(name=self.name) & live_q(), ["token"]), writes=False
        )
        return str(rows[0][0]) if rows else None

    def remaining(self) -> float | None:
        rows = self._run(
            "reading",
            lambda c: _select(
                c, Q(name=self.name) & live_q(), ["valid_until", "db_now"], db_now=DbNow()
            ),
            writes=False,
        )
        if not rows:
            return None
        valid_until, db_now = rows[0]
        return max(0.0, (as_utc(valid_until) - as_utc(db_now)).total_seconds())

    def epoch(self) -> int | None:
        """The fencing epoch of the row while it holds our token (None otherwise)."""
        rows = self._run(
            "reading",
            lambda c: _select(c, Q(name=self.name, token=self.token), ["epoch"]),
            writes=False,
        )
        return int(rows[0][0]) if rows else None


class DatabaseBackend:
    """Leases as rows of the project's database (``SchedulerLease``)."""

    name = "database"
    fences_in_lease = True

    def lease(self, name: str, node_id: str, ttl: float) -> DatabaseLease:
        return DatabaseLease(name, node_id, ttl)

    def _run(
        self, what: str, action: Callable[[BaseDatabaseWrapper], T], *, writes: bool = True
    ) -> T:
        return _run(what, action, writes=writes)

    def held(self, prefix: str) -> list[HeldLease]:
        def read(connection: BaseDatabaseWrapper) -> list[tuple[Any, ...]]:
            filters = Q(name__startswith=prefix) & live_q()
            queryset = (
                _model()
                .objects.filter(filters)
                .annotate(db_now=DbNow())
                .order_by("name")
                .values_list("name", "token", "valid_until", "db_now")[:SCAN_LIMIT]
            )
            return list(queryset.query.get_compiler(connection=connection).results_iter())

        rows = self._run("listing leases", read, writes=False)
        return [
            HeldLease(
                name=str(name)[len(prefix) :],
                owner=str(token),
                ttl=max(0.0, (as_utc(until) - as_utc(now)).total_seconds()),
            )
            for name, token, until, now in rows
        ]

    def force_release(self, name: str) -> bool:
        return self._free(name, Q())

    def release_held_by(self, name: str, token: str) -> bool:
        return self._free(name, Q(token=token))

    def _free(self, name: str, held: Q) -> bool:
        filters = Q(name=name) & held & live_q()
        return bool(
            self._run(
                f"releasing {name!r}",
                lambda c: _update(c, filters, {"valid_until": None, "token": ""}),
            )
        )
