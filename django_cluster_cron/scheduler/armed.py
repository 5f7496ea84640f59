"""The leader's runs recorded ahead, their messages built, waiting for their instant.

In memory only, and only while this node leads: the run rows are the outbox. A leader that
steps down forgets them (another leader takes them over from the rows, see
:meth:`~django_cluster_cron.scheduler.loop.Scheduler._take_over`), and a run an operator
withdrew or cancelled meanwhile is dropped by the check made right before sending.
"""

from __future__ import annotations

import heapq
import itertools
from datetime import datetime

from .prepared import PreparedGroup


class Armed:
    """Prepared groups by due time, earliest first; ``count`` is the runs they hold."""

    def __init__(self) -> None:
        self._heap: list[tuple[datetime, int, PreparedGroup]] = []
        self._order = itertools.count()
        self.count = 0

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, groups: list[PreparedGroup]) -> None:
        for group in groups:
            heapq.heappush(self._heap, (group.due, next(self._order), group))
            self.count += len(group)

    def earliest(self) -> datetime | None:
        return self._heap[0][0] if self._heap else None

    def take_due(self, now: datetime, limit: int) -> list[PreparedGroup]:
        """The groups due by ``now``, earliest first, about ``limit`` runs at most (whole
        groups: at least one)."""
        taken: list[PreparedGroup] = []
        runs = 0
        while self._heap and self._heap[0][0] <= now and (not taken or runs < limit):
            group = heapq.heappop(self._heap)[2]
            self.count -= len(group)
            runs += len(group)
            taken.append(group)
        return taken

    def clear(self) -> None:
        self._heap.clear()
        self.count = 0
