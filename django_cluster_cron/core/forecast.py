"""What fires when: the dispatch times of many jobs over a coming window, counted per bucket.

The admin's "next hour" view draws this so an operator sees the 09:00:00 pile-up before it
happens. Pure: the caller passes each job's name, parsed schedule and timing (period, jitter).
Bounded: it stops after ``limit`` dispatch times in all and says so, so ten thousand per-second
jobs cannot make a page view iterate for minutes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from datetime import datetime

from .kinds import Schedule
from .timing import SlotTiming

__all__ = ["Bucket", "Forecast", "forecast"]


@dataclasses.dataclass
class Bucket:
    """The dispatches that fall in ``[start, start + width)``."""

    start: datetime
    count: int = 0
    jobs: Counter[str] = dataclasses.field(default_factory=Counter)


@dataclasses.dataclass
class Forecast:
    start: datetime
    end: datetime
    buckets: list[Bucket]
    total: int = 0
    jobs: int = 0
    truncated: bool = False  # stopped at the limit: the counts are lower bounds
    busiest_second: datetime | None = None
    busiest_count: int = 0

    @property
    def peak(self) -> int:
        return max((bucket.count for bucket in self.buckets), default=0)


def forecast(
    jobs: Iterable[tuple[str, Schedule, SlotTiming, int | None]],
    start: datetime,
    end: datetime,
    buckets: int,
    limit: int = 200_000,
    after: datetime | None = None,
) -> Forecast:
    """Count each job's dispatch times (slot plus jitter) in ``(start, end]`` into ``buckets``
    equal buckets, and find the second in which most jobs are dispatched.

    Each job is ``(name, schedule, timing, runs left)``; runs left is None when unlimited.
    ``after`` (inside the window) counts only what comes after it, so the buckets can start on
    a round time while the past part of the first one stays empty.
    """
    if end <= start or buckets < 1:
        raise ValueError("the window must end after it starts and have at least one bucket")
    width = (end - start) / buckets
    result = Forecast(start, end, [Bucket(start + width * i) for i in range(buckets)])
    seconds: Counter[datetime] = Counter()
    for name, schedule, timing, runs_left in jobs:
        result.jobs += 1
        dues: list[datetime] = []
        for slot, due in timing.due_after(schedule, after or start):
            if slot > end:
                break  # every later slot is due later still
            if due > end:
                continue  # jitter pushed this one out; a later slot may still land inside
            if result.total + len(dues) >= limit:
                result.truncated = True
                break
            dues.append(due)
        if runs_left is not None:
            # The scheduler dispatches in due order; with jitter that is not slot order.
            dues = sorted(dues)[:runs_left]
        for due in dues:
            bucket = result.buckets[min(int((due - start) / width), buckets - 1)]
            bucket.count += 1
            bucket.jobs[name] += 1
            seconds[due.replace(microsecond=0)] += 1
        result.total += len(dues)
        if result.truncated:
            break
    if seconds:
        result.busiest_second, result.busiest_count = max(
            seconds.items(), key=lambda item: (item[1], -item[0].timestamp())
        )
    return result
