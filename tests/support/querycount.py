"""Counting and timing the SQL a block of code runs (tests and benchmarks).

Django's ``CaptureQueriesContext`` reads ``connection.queries``, which every request start
clears, so around a test-client request it can count nothing. An execute wrapper sees every query:
on Django's connection of this thread and on this thread's lease connection (the database lease
backend keeps one of its own, see :mod:`django_cluster_cron.leases.database`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connection


@dataclass
class QueryLog:
    queries: list[tuple[str, float]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.queries)

    @property
    def seconds(self) -> float:
        return sum(duration for _, duration in self.queries)


@contextmanager
def count_queries() -> Iterator[QueryLog]:
    log = QueryLog()

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            log.queries.append((sql, time.perf_counter() - started))

    from django_cluster_cron.leases.database import private_wrapper

    with ExitStack() as stack:
        for wrapped in (connection, private_wrapper()):
            if wrapped is not None:
                stack.enter_context(wrapped.execute_wrapper(wrapper))
        yield log
