"""Turns what changed between two snapshots into sentences a newcomer can follow.

"demo-a killed (SIGKILL)" is noted by the demo when it acts; the narrator then watches for the
new epoch ("demo-b took the lease at epoch 4, 3.4 s after demo-a was killed") and for the new
leader's first dispatch ("... 1 late slot caught up, 2 recorded missed").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from .snapshot import Snapshot, Takeover

MAX_EVENTS = 200


@dataclass(frozen=True)
class Event:
    at: datetime
    text: str
    style: str = ""


@dataclass
class Leadership:
    epoch: int
    holder: str
    acquired_at: datetime
    after_action: float | None  # seconds from the demo's last action to the takeover
    first_dispatch: Takeover | None = None


class Narrator:
    def __init__(
        self,
        start_epoch: int | None,
        takeover: Callable[[int, datetime], Takeover | None],
    ) -> None:
        self.events: deque[Event] = deque(maxlen=MAX_EVENTS)
        self.leaderships: list[Leadership] = []
        self._epoch = start_epoch
        self._takeover = takeover
        self._action: tuple[str, datetime] | None = None  # (what, when) to time a takeover
        self._leader: str | None = None
        self._redis_down_since: datetime | None = None
        self._db_down = False
        self._announced: set[tuple[str, datetime, int, str]] = set()
        self._first_success = False
        self._first_retry = False
        self._new: deque[Event] = deque(maxlen=MAX_EVENTS)  # said since the last drain()

    def say(self, at: datetime, text: str, style: str = "") -> Event:
        event = Event(at, text, style)
        self.events.append(event)
        self._new.append(event)
        return event

    def action(self, at: datetime, text: str, short: str) -> Event:
        """The demo did something that should change the leader; time the takeover from here.

        ``short`` names it in the takeover sentence: "... 2.7 s after <short>".
        """
        self._action = (short, at)
        return self.say(at, text, "bold yellow")

    def observe(self, snap: Snapshot) -> None:
        self._health(snap)
        self._leadership(snap)
        self._runs(snap)

    def drain(self) -> list[Event]:
        """The events said since the last call (for a plain, line-by-line log)."""
        new = list(self._new)
        self._new.clear()
        return new

    def _health(self, snap: Snapshot) -> None:
        if snap.db_error and not self._db_down:
            self.say(snap.now, f"database unreachable: {snap.db_error}", "bold red")
        elif not snap.db_error and self._db_down:
            self.say(snap.now, "database reachable again", "green")
        self._db_down = bool(snap.db_error)
        if snap.redis_error and self._redis_down_since is None:
            self._redis_down_since = snap.now
            self.say(
                snap.now,
                "Redis unreachable: no node can prove it holds the lease, so nobody dispatches "
                "(fail safe). Due slots wait in the database.",
                "bold red",
            )
        elif not snap.redis_error and self._redis_down_since is not None:
            gone = (snap.now - self._redis_down_since).total_seconds()
            self._redis_down_since = None
            self._leader = None  # a restarted Redis holds no lease: that is not a node dying
            self.say(snap.now, f"Redis answers again (down for about {gone:.0f} s)", "green")

    def _leadership(self, snap: Snapshot) -> None:
        if snap.db_error:
            return
        if (
            snap.epoch is not None
            and snap.epoch != self._epoch
            and snap.acquired_at is not None
            and snap.epoch_holder
        ):
            self._epoch = snap.epoch
            after = None
            text = f"{snap.epoch_holder} took the lease at epoch {snap.epoch}"
            if self._action is not None:
                what, at = self._action
                after = (snap.acquired_at - at).total_seconds()
                text += f", {after:.1f} s after {what}"
                self._action = None
            self.leaderships.append(
                Leadership(snap.epoch, snap.epoch_holder, snap.acquired_at, after)
            )
            self.say(snap.now, text, "bold green")
        elif snap.leader is None and self._leader is not None and not snap.redis_error:
            self.say(
                snap.now,
                f"nobody holds the lease ({self._leader} is gone); a standby takes it when the "
                "lease runs out",
                "yellow",
            )
        if not snap.redis_error:
            self._leader = snap.leader
        current = self.leaderships[-1] if self.leaderships else None
        if current is not None and current.first_dispatch is None:
            found = self._takeover(current.epoch, current.acquired_at)
            if found is not None:
                current.first_dispatch = found
                self.say(
                    snap.now, _first_dispatch(current.holder, current.acquired_at, found), "green"
                )

    def _runs(self, snap: Snapshot) -> None:
        for run in snap.runs:
            key = (run.job, run.slot, run.attempt, run.status)
            if key in self._announced:
                continue
            if not run.this_demo:
                continue
            if run.status == "success" and not self._first_success:
                self._first_success = True
                self._announced.add(key)
                took = f" in {run.duration.total_seconds():.1f} s" if run.duration else ""
                self.say(
                    snap.now,
                    f"first run succeeded: '{run.job}' on {run.worker or 'a worker'}{took}",
                    "green",
                )
            elif run.status == "failed":
                self._announced.add(key)
                note = f": {run.note}" if run.note else ""
                self.say(
                    snap.now, f"'{run.job}' failed for good at attempt {run.attempt}{note}", "red"
                )
            elif run.status == "retrying" and not self._first_retry:
                # Once is enough to explain retries; the runs table shows the rest.
                self._first_retry = True
                self._announced.add(key)
                self.say(
                    snap.now,
                    f"'{run.job}' attempt {run.attempt - 1} failed; the same run is retried as "
                    f"attempt {run.attempt} after a backoff (a retry is never a second run)",
                    "magenta",
                )


def _first_dispatch(holder: str, acquired_at: datetime, found: Takeover) -> str:
    if found.slot < acquired_at:
        delay = (found.sent_at - acquired_at).total_seconds()
        text = f"{holder} sent its first run {max(delay, 0):.1f} s after taking over"
    else:  # nothing was owed: it waited for the next slot
        delay = (found.sent_at - found.slot).total_seconds()
        text = (
            f"{holder} sent the next slot ('{found.job}' {found.slot:%H:%M:%S}) "
            f"{max(delay, 0):.1f} s after it fell due"
        )
    if found.late or found.missed:
        late = f"{found.late} {'was' if found.late == 1 else 'were'} run late"
        missed = f"{found.missed} {'was' if found.missed == 1 else 'were'} recorded missed"
        text += (
            f"; of the slots that fell due while nobody led, {late} and {missed} (catch-up policy)"
        )
    return text
