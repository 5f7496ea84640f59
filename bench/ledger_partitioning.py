"""Partitioning the ledger by slot time on PostgreSQL, measured before it is offered.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/dccbench \\
        .venv/bin/python bench/ledger_partitioning.py [--runs 10000000] [--months 12]

Two tables of the ledger's columns and indexes, filled alike (--runs runs of 1,000 jobs over
--months months of slots, in SQL): ``plain``, as the ledger is, and ``parted``, range-partitioned
by month on ``scheduled_for`` with a default partition. Then, on each, in one run:

* the pages' queries (the newest 100; one status; one job; one day), median of --repeat;
* a burst of 10,000 inserts (the leader's multi-row INSERT), median of 3;
* removing the oldest month: on ``plain`` our pruning's deletes (10,000 ids a statement, as
  ``ledger.retention`` does), then a plain VACUUM; on ``parted`` DETACH + DROP of its partition;
  the time, and the table's size before and after (the bloat a delete leaves);
* the pages' queries again.

The ledger's constraints that partitioning breaks are printed too: PostgreSQL wants the
partition key in every unique constraint and primary key, so ``task_id`` (unique) and the run's
``id`` (which pieces reference) would no longer be unique across the table by themselves.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from _env import boot

COLUMNS = """
    id bigint NOT NULL,
    job_id integer NOT NULL,
    scheduled_for timestamptz NOT NULL,
    due_at timestamptz,
    status varchar(16) NOT NULL,
    task_id varchar(255) NOT NULL,
    "trigger" varchar(16) NOT NULL,
    attempt integer NOT NULL,
    started_at timestamptz,
    finished_at timestamptz,
    duration interval,
    worker varchar(255) NOT NULL,
    error text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
"""
INDEXES = [
    "(status, scheduled_for)",
    "(scheduled_for DESC)",
    '("trigger", scheduled_for)',
    "(started_at)",
    "(job_id, status, scheduled_for DESC)",
]


def sql(cursor: Any, statement: str, params: list[Any] | None = None) -> float:
    begin = time.perf_counter()
    cursor.execute(statement, params or [])
    return time.perf_counter() - begin


def size(cursor: Any, table: str) -> int:
    cursor.execute("SELECT pg_total_relation_size(%s)", [table])
    total = int(cursor.fetchone()[0])
    cursor.execute(
        "SELECT COALESCE(SUM(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits "
        "WHERE inhparent = %s::regclass",
        [table],
    )
    return total + int(cursor.fetchone()[0])


def build(cursor: Any, runs: int, months: int) -> dict[str, float]:
    for table in ("plain", "parted"):
        cursor.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
    cursor.execute(f"CREATE TABLE plain ({COLUMNS}, PRIMARY KEY (id))")
    cursor.execute("CREATE UNIQUE INDEX plain_task ON plain (task_id)")
    cursor.execute("CREATE UNIQUE INDEX plain_slot ON plain (job_id, scheduled_for)")
    # Unique constraints must hold the partition key: (id, slot), (task_id, slot).
    cursor.execute(
        f"CREATE TABLE parted ({COLUMNS}, PRIMARY KEY (id, scheduled_for)) "
        "PARTITION BY RANGE (scheduled_for)"
    )
    cursor.execute("CREATE UNIQUE INDEX parted_task ON parted (task_id, scheduled_for)")
    cursor.execute("CREATE UNIQUE INDEX parted_slot ON parted (job_id, scheduled_for)")
    cursor.execute("SELECT date_trunc('month', now())")
    this_month = cursor.fetchone()[0]
    for back in range(months, -2, -1):
        cursor.execute(
            "SELECT %s::timestamptz - make_interval(months => %s), "
            "%s::timestamptz - make_interval(months => %s)",
            [this_month, back, this_month, back - 1],
        )
        start, end = cursor.fetchone()
        cursor.execute(
            f"CREATE TABLE parted_m{months - back + 1:03d} PARTITION OF parted "
            "FOR VALUES FROM (%s) TO (%s)",
            [start, end],
        )
    cursor.execute("CREATE TABLE parted_default PARTITION OF parted DEFAULT")
    for number, columns in enumerate(INDEXES):
        for table in ("plain", "parted"):
            cursor.execute(f"CREATE INDEX {table}_i{number} ON {table} {columns}")
    spacing = months * 30 * 86_400 / runs
    filled = {}
    for table in ("plain", "parted"):
        filled[table] = sql(
            cursor,
            f"""
            INSERT INTO {table}
            SELECT g, 1 + g %% 1000, now() - make_interval(secs => g * %s),
                   now() - make_interval(secs => g * %s),
                   CASE g %% 12 WHEN 0 THEN 'failed' WHEN 6 THEN 'missed' ELSE 'success' END,
                   'bench-' || g, 'schedule', 1, now(), now(), interval '1 second', 'w', '',
                   now(), now()
            FROM generate_series(1, %s) AS g
            """,
            [spacing, spacing, runs],
        )
        cursor.execute(f"VACUUM ANALYZE {table}")
    return filled


def pages(cursor: Any, table: str, repeat: int) -> dict[str, float]:
    cursor.execute(f"SELECT max(scheduled_for) - interval '40 days' FROM {table}")
    day = cursor.fetchone()[0]
    queries = {
        "newest 100": f"SELECT * FROM {table} ORDER BY scheduled_for DESC LIMIT 100",
        "failed, newest 100": (
            f"SELECT * FROM {table} WHERE status = 'failed' ORDER BY scheduled_for DESC LIMIT 100"
        ),
        "one job, newest 100": (
            f"SELECT * FROM {table} WHERE job_id = 7 ORDER BY scheduled_for DESC LIMIT 100"
        ),
        "one day, newest 100": (
            f"SELECT * FROM {table} WHERE scheduled_for >= %s "
            "AND scheduled_for < %s + interval '1 day' ORDER BY scheduled_for DESC LIMIT 100"
        ),
    }
    found = {}
    for name, query in queries.items():
        params = [day, day] if "%s" in query else []
        timings = []
        for _ in range(repeat):
            timings.append(sql(cursor, query, params))
            cursor.fetchall()
        found[name] = statistics.median(timings)
    return found


def burst(cursor: Any, table: str, first_id: int) -> float:
    timings = []
    for rep in range(3):
        start = first_id + rep * 10_000
        timings.append(
            sql(
                cursor,
                f"""
                INSERT INTO {table}
                SELECT g, 1 + g %% 1000, now() + make_interval(secs => g), now(), 'pending',
                       'burst-' || g, 'schedule', 1, NULL, NULL, NULL, '', '', now(), now()
                FROM generate_series(%s, %s) AS g
                """,
                [start, start + 9_999],
            )
        )
    cursor.execute(f"DELETE FROM {table} WHERE id >= %s", [first_id])
    return statistics.median(timings)


def remove_oldest_month(cursor: Any, months: int) -> dict[str, float]:
    found: dict[str, float] = {}
    # The oldest month that holds runs (the fill need not start on a month's first day).
    for number in range(1, months + 3):
        part = f"parted_m{number:03d}"
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {part})")
        if cursor.fetchone()[0]:
            break
    cursor.execute("SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = %s", [part])
    bound = cursor.fetchone()[0]
    upper = bound.split("TO ('")[1].split("')")[0]
    cursor.execute("SELECT id FROM plain WHERE scheduled_for < %s ORDER BY id", [upper])
    ids = [row[0] for row in cursor.fetchall()]
    found["rows"] = len(ids)
    found["plain size before"] = size(cursor, "plain")
    begin = time.perf_counter()
    for start in range(0, len(ids), 10_000):
        cursor.execute("DELETE FROM plain WHERE id = ANY(%s)", [ids[start : start + 10_000]])
    found["plain delete s"] = time.perf_counter() - begin
    found["plain vacuum s"] = sql(cursor, "VACUUM plain")
    found["plain size after"] = size(cursor, "plain")
    found["parted size before"] = size(cursor, "parted")
    begin = time.perf_counter()
    cursor.execute(f"ALTER TABLE parted DETACH PARTITION {part}")
    cursor.execute(f"DROP TABLE {part}")
    found["parted drop s"] = time.perf_counter() - begin
    found["parted size after"] = size(cursor, "parted")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000_000)
    parser.add_argument("--months", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    boot()
    from django.db import connection

    if connection.vendor != "postgresql":
        raise SystemExit("ledger_partitioning: PostgreSQL only (DATABASE_URL=postgres://…)")
    with connection.cursor() as cursor:
        filled = build(cursor, args.runs, args.months)
        print(f"{args.runs:,} runs over {args.months} months")
        for table, seconds in filled.items():
            print(f"  fill {table:<7} {seconds:7.1f} s, {size(cursor, table) / 2**20:,.0f} MiB")
        before = {table: pages(cursor, table, args.repeat) for table in ("plain", "parted")}
        bursts = {table: burst(cursor, table, 10 * args.runs) for table in ("plain", "parted")}
        removed = remove_oldest_month(cursor, args.months)
        after = {table: pages(cursor, table, args.repeat) for table in ("plain", "parted")}
        print(f"\n{'query (median ms)':<24} {'plain':>8} {'parted':>8} {'ratio':>7}")
        for label, found in (("", before), (" (after)", after)):
            for name in found["plain"]:
                plain, parted = found["plain"][name] * 1000, found["parted"][name] * 1000
                print(f"{name + label:<24} {plain:>8.2f} {parted:>8.2f} {parted / plain:>6.2f}x")
        plain, parted = bursts["plain"], bursts["parted"]
        print(
            f"{'burst of 10,000 inserts':<24} {plain * 1000:>8.1f} {parted * 1000:>8.1f} "
            f"{parted / plain:>6.2f}x"
        )
        rows = int(removed["rows"])
        print(f"\nremoving the oldest month ({rows:,} runs)")
        print(
            f"  plain: delete {removed['plain delete s']:.1f} s "
            f"({rows / removed['plain delete s']:,.0f} runs/s), vacuum "
            f"{removed['plain vacuum s']:.1f} s; size {removed['plain size before'] / 2**20:,.0f}"
            f" -> {removed['plain size after'] / 2**20:,.0f} MiB"
        )
        print(
            f"  parted: detach + drop {removed['parted drop s'] * 1000:.0f} ms; size "
            f"{removed['parted size before'] / 2**20:,.0f} -> "
            f"{removed['parted size after'] / 2**20:,.0f} MiB"
        )
        print(
            "\nconstraints partitioning changes: PRIMARY KEY (id) -> (id, scheduled_for); "
            "UNIQUE (task_id) -> (task_id, scheduled_for); a foreign key to a run's id "
            "(JobPiece.run) needs a unique id alone, which the partitioned table cannot give"
        )
        for table in ("plain", "parted"):
            cursor.execute(f"DROP TABLE IF EXISTS {table} CASCADE")


if __name__ == "__main__":
    main()
