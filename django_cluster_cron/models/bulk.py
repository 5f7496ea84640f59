"""Statements over many rows, beside Django's own: a long list of ids as one parameter
(:class:`AnyOf`), a row comparison and one value's range of an index (:class:`RowBefore`,
:func:`prefix_range`), moments read as text (:class:`MomentText`, :func:`moment_reader`), an
index named on MySQL/MariaDB (:func:`through_index`), and no compiling on PostgreSQL
(:func:`uncompiled`).

Each answers a cost measured at scale. On PostgreSQL with psycopg 3: Django binds each value of
an ``IN`` list as a placeholder that psycopg splits out again on every call; it reads each
``timestamptz`` through a loader written in Python (about 5 µs a value: a second for the
200,000 moments of a 100,000-job list, against a fifth of a second as text); a bound on the
slot alone, or the status matched, let the planner read the slot index past every row of other
statuses; and JIT compiled statements whose estimated cost is high but whose work is small. On
MariaDB: the newest runs of one job were read through an index that does not give their order,
or past every other job's runs."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from django.db import connection, transaction
from django.db.models import BooleanField, CharField, F, Func, Model, Q, Value
from django.db.models.expressions import Expression
from django.db.models.lookups import In


class AnyOf(In):
    """``AnyOf("pk", ids)`` in ``filter()``: the rows whose column is one of ``ids``, a list of
    whole numbers (or strings) without ``None``. PostgreSQL gets one array parameter
    (``= ANY(%s)``; whole numbers as the array's text, which psycopg passes on as it is, where it
    dumps a list element by element: 2.7 ms for 2,000 ids); the other databases ``IN`` as Django
    writes it. The values are handed over as they are."""

    def __init__(self, field: str, values: Sequence[Any]) -> None:
        super().__init__(F(field), list(values))

    def get_prep_lookup(self) -> Any:
        return self.rhs

    def as_postgresql(self, compiler: Any, connection: Any) -> Any:
        if not self.rhs:
            return super().as_sql(compiler, connection)  # nothing matches, as IN says
        lhs, lhs_params = self.process_lhs(compiler, connection)
        if all(type(value) is int for value in self.rhs):
            listed = "{" + ",".join(map(str, self.rhs)) + "}"
            return f"{lhs} = ANY(%s::bigint[])", [*lhs_params, listed]
        return f"{lhs} = ANY(%s)", [*lhs_params, self.rhs]


class RowBefore(Func):
    """``(a, b) < (c, d)`` in ``filter()``: a row comparison, which an index on (a, b) serves as
    one range (with ``a = c`` beside it: the rows of ``c`` before ``d``)."""

    output_field = BooleanField()
    conditional = True
    operator = "<"

    def as_sql(
        self,
        compiler: Any,
        connection: Any,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> Any:
        parts, params = [], []
        for expression in self.get_source_expressions():
            sql, found = compiler.compile(expression)
            parts.append(sql)
            params.extend(found)
        first, second, third, fourth = parts
        return f"({first}, {second}) {self.operator} ({third}, {fourth})", params


class RowFrom(RowBefore):
    """``(a, b) >= (c, d)`` in ``filter()``."""

    operator = ">="


def prefix_range(
    field: str, value: Any, then: str, before: Expression, since: Expression | None = None
) -> Q:
    """The rows whose ``field`` is ``value`` and ``then`` before ``before`` (and from ``since``
    on), as one range of an index on (field, then); order them by both columns. On PostgreSQL
    ``field`` is bounded, not matched: given the equality, the planner takes ``field`` out of the
    order and may read an index on ``then`` alone, stepping over every row of other values (its
    heap order costs less on paper). The bounds select exactly the rows of ``value``."""
    upper = RowBefore(F(field), F(then), Value(value), before)
    if connection.vendor != "postgresql":
        found = Q(upper, **{field: value})
        return found if since is None else found & Q(**{f"{then}__gte": since})
    if since is None:
        return Q(upper, **{f"{field}__gte": value})
    return Q(upper, RowFrom(F(field), F(then), Value(value), since))


class MomentText(Func):
    """A moment column as text, read back with :func:`moment_reader`: ISO 8601 without an offset, in
    UTC on PostgreSQL (whatever the session's zone and date style), as stored elsewhere."""

    output_field = CharField()
    template = "CAST(%(expressions)s AS CHAR)"

    def __init__(self, field: str) -> None:
        super().__init__(F(field))

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # A bare column would come back parsed: Django asks sqlite3 to parse declared types.
        return self.as_sql(compiler, connection, template="CAST(%(expressions)s AS TEXT)")

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler,
            connection,
            template="to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')",
        )


# What may follow a table in FROM where no alias is written.
_NOT_ALIAS = "WHERE|INNER|LEFT|RIGHT|CROSS|JOIN|STRAIGHT_JOIN|ORDER|GROUP|HAVING|LIMIT|UNION|FOR"


@contextmanager
def through_index(model: type[Model], index: str) -> Iterator[None]:
    """The statements run inside read ``model``'s table through ``index`` on MySQL/MariaDB
    (``FORCE INDEX`` after each ``FROM table [alias]``; Django has no hint of its own); nothing
    changes elsewhere. MariaDB read "the newest runs of one job" through an index that does not
    give their order, or through the slot index stepping over every other job's runs, as its
    estimates went: a sort of each job's runs (`cron list`: 10 s for 1,000 jobs and 2 M runs),
    30 ms a job (the jobs list's run strips, at 50 M runs). PostgreSQL plans them right."""
    if connection.vendor != "mysql":
        yield
        return
    table = re.escape(connection.ops.quote_name(model._meta.db_table))
    found = re.compile(rf"FROM {table}(?:\s+(?!(?:{_NOT_ALIAS})\b)\w+)?", re.IGNORECASE)
    hint = f" FORCE INDEX ({connection.ops.quote_name(index)})"

    def hinted(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        return execute(found.sub(lambda match: match.group(0) + hint, sql), params, many, context)

    with connection.execute_wrapper(hinted):
        yield


def moment_reader() -> Callable[[str | None], datetime | None]:
    """What turns :class:`MomentText`'s text back into an aware moment (None for NULL), for
    the default database's zone."""
    zone = timezone.utc if connection.vendor == "postgresql" else connection.timezone

    def parse(text: str) -> datetime:
        moment = datetime.fromisoformat(text)  # a row written with its offset keeps it
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)

    if zone is timezone.utc or getattr(zone, "key", None) == "UTC":
        # Parsed with its offset: a sixth of the time of replacing the zone afterwards.
        def read_utc(text: str | None) -> datetime | None:
            if text is None:
                return None
            try:
                return datetime.fromisoformat(text + "+00:00")
            except ValueError:
                return parse(text)

        return read_utc

    def read(text: str | None) -> datetime | None:
        return None if text is None else parse(text)

    return read


@contextmanager
def uncompiled() -> Iterator[None]:
    """PostgreSQL's JIT off for the statements inside (``SET LOCAL jit = off`` in a transaction
    of their own; nothing elsewhere). PostgreSQL compiles a statement whose estimated cost
    passes ``jit_above_cost``: one that reads every job with a subquery each is costed that
    high, and compiling it took 2.2 s of CPU for a statement that runs in 0.2 s."""
    if connection.vendor != "postgresql":
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL jit = off")
        yield
