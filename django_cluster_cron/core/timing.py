"""When a job's slots exist and when each is due: its active period and its jitter.

Pure: everything here is a function of the job's stored policy and the slot, so every scheduler
host (and the admin's preview) computes the same answer.

* ``start_at`` / ``end_at`` bound the schedule: a slot before the start or after the end is not a
  slot of the job at all (nothing is owed for it, nothing is recorded).
* ``jitter`` spreads slots that would all fire at the same instant (``0 * * * *`` on thousands of
  jobs): slot ``s`` of job ``key`` is *due* at ``s + offset(key, s)`` where the offset lies in
  ``[0, jitter]``. The offset comes from a hash of the job id and the slot, not from a random
  generator, so it is the same on every host, in every process, after every restart. The slot
  itself stays the run's identity (its task id, the ledger's unique key); only the moment it is
  dispatched moves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from .errors import ScheduleError
from .kinds import Schedule
from .timezones import UTC

_ZERO = timedelta(0)
# Before the first slot of a bounded schedule: slots *at* ``start_at`` belong to the job.
_TICK = timedelta(microseconds=1)


def jitter_offset(key: int, slot: datetime, jitter: timedelta) -> timedelta:
    """The deterministic delay of ``slot`` of job ``key``: whole seconds in ``[0, jitter]``.

    BLAKE2b of the job id and the slot's UTC instant, reduced modulo the number of possible
    offsets — independent of the process, the host, ``PYTHONHASHSEED`` and the slot's zone.
    """
    if jitter <= _ZERO:
        return _ZERO
    if slot.tzinfo is None:
        raise ScheduleError("slot", f"slot must be timezone-aware, got naive {slot!r}.")
    utc = slot.astimezone(UTC)
    material = f"{key}:{utc:%Y-%m-%dT%H:%M:%S.%f}".encode()
    digest = hashlib.blake2b(material, digest_size=8).digest()
    choices = int(jitter.total_seconds()) + 1
    return timedelta(seconds=int.from_bytes(digest, "big") % choices)


@dataclass(frozen=True)
class SlotTiming:
    """A job's active period and jitter; the default bounds nothing and delays nothing."""

    start_at: datetime | None = None
    end_at: datetime | None = None
    jitter: timedelta = _ZERO
    key: int = 0  # the job id: what makes two jobs' offsets differ

    def __post_init__(self) -> None:
        if self.jitter < _ZERO:
            raise ScheduleError("jitter", f"jitter must not be negative: {self.jitter}.")
        if self.start_at and self.end_at and self.end_at < self.start_at:
            raise ScheduleError(
                "end_at", f"the end ({self.end_at}) is before the start ({self.start_at})."
            )

    def offset(self, slot: datetime) -> timedelta:
        return jitter_offset(self.key, slot, self.jitter)

    def due_at(self, slot: datetime) -> datetime:
        """When ``slot`` is dispatched: the slot plus its jitter offset."""
        return slot + self.offset(slot) if self.jitter > _ZERO else slot

    def has_ended(self, now: datetime) -> bool:
        return self.end_at is not None and now > self.end_at

    def slots_after(self, schedule: Schedule, after: datetime) -> Iterator[datetime]:
        """The job's slots after ``after`` (slot order), inside ``[start_at, end_at]``."""
        if self.start_at is not None and after < self.start_at:
            after = self.start_at - _TICK
        for slot in schedule.iter_after(after):
            if self.end_at is not None and slot > self.end_at:
                return
            yield slot

    def due_after(self, schedule: Schedule, after: datetime) -> Iterator[tuple[datetime, datetime]]:
        """``(slot, due)`` pairs, slot order, of every slot whose due time is after ``after``.

        A slot is due at most ``jitter`` after itself, so the slots to look at start ``jitter``
        before ``after``; with jitter larger than the gap between slots, due times may come out
        of order (the caller decides by due time, not by position).
        """
        for slot in self.slots_after(schedule, after - self.jitter):
            due = self.due_at(slot)
            if due > after:
                yield slot, due

    def next_due_after(self, schedule: Schedule, after: datetime) -> datetime | None:
        """The earliest due time after ``after`` (what the scheduler's due index holds)."""
        best: datetime | None = None
        for slot, due in self.due_after(schedule, after):
            if best is not None and slot >= best:
                break  # every later slot is due at or after itself, so after ``best``
            if best is None or due < best:
                best = due
            if self.jitter == _ZERO:
                break
        return best

    def upcoming(
        self, schedule: Schedule, after: datetime, limit: int
    ) -> list[tuple[datetime, datetime]]:
        """The next ``limit`` ``(slot, due)`` pairs in due order (the preview's list)."""
        found: list[tuple[datetime, datetime]] = []
        for slot, due in self.due_after(schedule, after):
            if len(found) >= limit and slot >= found[-1][1]:
                break
            found.append((slot, due))
            found.sort(key=lambda pair: pair[1])
            del found[limit:]
        return found
