"""``bulk_create(ignore_conflicts=True)`` for rows that differ in a few columns only.

The scheduler inserts thousands of runs per tick that share most of their columns (node, epoch,
empty timestamps, defaults). ``bulk_create`` builds a model instance per row and prepares every
field of every row; here the columns that are the same for the whole batch are prepared once
(from one template instance, so defaults and ``auto_now`` come from the model exactly as the ORM
computes them) and only the varying ones per row. The column list is every concrete field of the
model, as ``bulk_create`` writes it, so a field added to the model later is written too. The
statement is the backend's own conflict-ignoring insert (``INSERT ... ON CONFLICT DO NOTHING`` on
PostgreSQL, ``INSERT OR IGNORE`` on SQLite: what ``bulk_create`` emits), batched within the
backend's parameter limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connections, router
from django.db.models import NOT_PROVIDED, AutoField, Field, Model
from django.db.models.constants import OnConflict


class FastInsertError(ValueError):
    """The rows or the model cannot be inserted this way (says which field and why)."""


def insert_columns(model: type[Model]) -> list[Field[Any, Any]]:
    """The fields ``bulk_create`` writes for rows without a primary key, in its order."""
    return [
        f for f in model._meta.concrete_fields if not f.generated and not isinstance(f, AutoField)
    ]


def _check(model: type[Model], fields: list[Field[Any, Any]], names: Sequence[str]) -> None:
    attnames = {f.attname for f in fields}
    for name in names:
        if name not in attnames:
            raise FastInsertError(
                f"{model.__name__}: {name!r} is not an inserted column (expected one of "
                f"{', '.join(sorted(attnames))})"
            )
    for f in fields:
        # Both would need per-row SQL (DEFAULT, a custom placeholder); refuse rather than
        # write something bulk_create would not. A field with a Python default as well is
        # written with that default, as the ORM writes it (the schema's default serves other
        # writers: an earlier release during a rolling upgrade).
        if f.db_default is not NOT_PROVIDED and not f.has_default():
            raise FastInsertError(f"{model.__name__}.{f.name}: db_default is not supported")
        if hasattr(f, "get_placeholder"):
            raise FastInsertError(f"{model.__name__}.{f.name}: custom placeholders unsupported")


def insert_ignoring_conflicts(
    model: type[Model],
    varying: Sequence[str],
    rows: Sequence[Sequence[object]],
    constants: Mapping[str, object],
    now: datetime | None = None,
) -> None:
    """Insert ``rows`` (values of the ``varying`` attnames, in order) with ``constants``.

    Every other column gets what the ORM would write for a new instance built with
    ``constants``: its default, or the current time for ``auto_now``/``auto_now_add`` (one
    instant per call, where ``bulk_create`` reads the clock per row) — ``now`` if given (the
    scheduler passes the database's time). A row that conflicts with an existing
    one on any unique constraint is left out, the existing row left alone.
    """
    if not rows:
        return
    fields = insert_columns(model)
    overlap = set(varying) & set(constants)
    if overlap:
        raise FastInsertError(f"{model.__name__}: {sorted(overlap)} both varying and constant")
    _check(model, fields, [*varying, *constants])
    width = len(varying)
    for number, row in enumerate(rows):
        if len(row) != width:
            raise FastInsertError(
                f"{model.__name__}: row {number} has {len(row)} values for {width} columns"
            )
    connection = connections[router.db_for_write(model)]
    template = model(**constants)
    position = {name: i for i, name in enumerate(varying)}
    shared: list[object] = []
    per_row: list[tuple[int, Field[Any, Any], int | None]] = []
    for index, f in enumerate(fields):
        if f.attname in position:
            per_row.append((index, f, position[f.attname]))
            shared.append(None)
        elif f.has_default() and callable(f.default) and f.attname not in constants:
            # e.g. a uuid4 default: a fresh value per row, as per-instance defaults give.
            per_row.append((index, f, None))
            shared.append(None)
        elif now is not None and (
            getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
        ):
            shared.append(f.get_db_prep_save(now, connection))
        else:
            shared.append(f.get_db_prep_save(f.pre_save(template, True), connection))
    ops = connection.ops
    columns = ", ".join(ops.quote_name(str(f.column)) for f in fields)
    head = f"{ops.insert_statement(on_conflict=OnConflict.IGNORE)} "
    head += f"{ops.quote_name(model._meta.db_table)} ({columns}) "
    tail = ops.on_conflict_suffix_sql(fields, OnConflict.IGNORE, None, None)
    batch = max(ops.bulk_batch_size(fields, rows), 1)
    with connection.cursor() as cursor:
        for start in range(0, len(rows), batch):
            values = []
            for row in rows[start : start + batch]:
                row_values = shared.copy()
                for index, f, source in per_row:
                    value = f.get_default() if source is None else row[source]
                    row_values[index] = f.get_db_prep_save(value, connection)
                values.append(row_values)
            if connection.vendor == "postgresql" and per_row:
                body, params = _unnest(connection, fields, shared, per_row, values)
            else:
                # bulk_insert_sql takes one list of placeholders per row (stubs say list[str]).
                placeholders: Any = [["%s"] * len(fields)] * len(values)
                body = ops.bulk_insert_sql(fields, placeholders)
                params = [value for row_values in values for value in row_values]
            cursor.execute(f"{head}{body} {tail}".rstrip(), params)


def _unnest(
    connection: Any,
    fields: list[Field[Any, Any]],
    shared: list[object],
    per_row: list[tuple[int, Field[Any, Any], int | None]],
    values: list[list[object]],
) -> tuple[str, list[object]]:
    """``SELECT ... FROM UNNEST(...)``: one array per varying column, one value per shared one.

    PostgreSQL's bulk_create sends every column as an array; a multi-row VALUES would need a
    placeholder per value, and psycopg re-parses such a query (too long for its cache) on every
    batch. Casts drop the type's parameters (``varchar``, not ``varchar(255)``), as Django does,
    so nothing is truncated silently.
    """

    def cast(f: Field[Any, Any]) -> str:
        return str(f.db_type(connection)).split("(")[0]

    varying = {index: n for n, (index, _f, _s) in enumerate(per_row)}
    select = [
        f"u.c{varying[i]}" if i in varying else f"(%s)::{cast(f)}" for i, f in enumerate(fields)
    ]
    arrays = ", ".join(f"(%s)::{cast(f)}[]" for _i, f, _s in per_row)
    aliases = ", ".join(f"c{n}" for n in range(len(per_row)))
    params: list[object] = [value for i, value in enumerate(shared) if i not in varying]
    params += [[row_values[index] for row_values in values] for index, _f, _s in per_row]
    return f"SELECT {', '.join(select)} FROM UNNEST({arrays}) AS u({aliases})", params
