"""The story played unattended (``demo.sh --script``, CI): plain lines, exit 1 if a step fails.

Runs succeed; the leader is SIGKILLed and a standby takes over and dispatches; the new leader is
SIGTERMed and hands over at once; Redis stops (only the demo's own) and comes back, and the
cluster catches up. With the database lease Redis is only the broker: a leader that cannot publish
hands the lease on, the nodes back off once none can, and every slot that fell due in the outage
runs once after the broker is back. Each
wait has a bound; the first one missed ends the story with what did not happen and the tail of
the logs that would say why.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.utils import timezone

from . import snapshot
from .app import Demo
from .narrator import Leadership
from .snapshot import Snapshot

REDIS_OUTAGE = 8.0  # seconds: longer than the lease TTL, so every node loses its lease
ECHO_JOB = "echo every 5 seconds"  # the demo job whose slots the broker outage counts


class StoryFailed(Exception):
    pass


class Story:
    def __init__(self, demo: Demo, write_line: Callable[[str], None]) -> None:
        self.demo = demo
        self.write_line = write_line
        self.t0 = time.monotonic()

    def line(self, text: str) -> None:
        self.write_line(f"[{time.monotonic() - self.t0:6.1f}s] {text}")

    def observe(self) -> Snapshot:
        snap = self.demo.observe()
        for event in self.demo.narrator.drain():
            self.line(f"  · {event.text}")
        return snap

    def wait(self, what: str, done: Callable[[Snapshot], bool], within: float) -> Snapshot:
        deadline = time.monotonic() + within
        while True:
            snap = self.observe()
            if self.demo.failures:
                raise StoryFailed("\n".join(self.demo.failures))
            if done(snap):
                return snap
            if time.monotonic() > deadline:
                raise StoryFailed(f"{what}: did not happen within {within:g} s")
            time.sleep(0.25)

    def new_leadership(self, after_epoch: int | None) -> Callable[[Snapshot], bool]:
        def done(snap: Snapshot) -> bool:
            latest = self.latest()
            return (
                latest is not None
                and (after_epoch is None or latest.epoch > after_epoch)
                and latest.first_dispatch is not None
            )

        return done

    def latest(self) -> Leadership | None:
        leaderships = self.demo.narrator.leaderships
        return leaderships[-1] if leaderships else None

    def play(self) -> None:
        ttl = self.demo.options.lease_ttl
        self.line(f"lease TTL {ttl:g} s in this demo (default 10 s), so failovers take seconds")
        self.wait("a scheduler takes the lease and dispatches", self.new_leadership(None), 40)
        self.wait(
            "3 runs succeed",
            lambda s: (
                snapshot.run_count(status="success", created_at__gte=self.demo.started_at) >= 3
            ),
            60,
        )
        self.line("3 runs succeeded; now kill the leader with SIGKILL (no chance to clean up)")
        self.failover(signal.SIGKILL, within=ttl + 20)
        self.line("now stop the new leader with SIGTERM (a deploy): it hands the lease over")
        self.failover(signal.SIGTERM, within=20)
        if self.demo.without_redis:
            self.every_slot_once()
        elif self.demo.owns_redis and self.demo.lease_backend == "database":
            self.broker_outage()
        elif self.demo.owns_redis:
            self.redis_outage(ttl)
        else:
            self.line(
                "skipping the Redis outage: Redis comes from REDIS_URL and is not ours to stop"
            )
        total = self.demo.observe().counts
        summary = ", ".join(f"{n} {status}" for status, n in sorted(total.items()))
        self.line(f"story complete: every step happened in time; runs this demo: {summary}")

    def failover(self, signum: signal.Signals, within: float) -> None:
        before = self.latest()
        assert before is not None
        snap = self.wait(
            f"{before.holder} leads", lambda s: self.demo.leader(s) is not None, within=20
        )
        message = self.demo.stop_leader(snap, signum)
        if message:
            raise StoryFailed(message)
        self.wait("a standby takes over and dispatches", self.new_leadership(before.epoch), within)
        after = self.latest()
        assert after is not None
        assert after.first_dispatch is not None
        first = after.first_dispatch
        sent = (first.sent_at - max(first.slot, after.acquired_at)).total_seconds()
        options = self.demo.options
        if signum == signal.SIGKILL:
            bound = f"G3 bound: TTL {options.lease_ttl:g} s + poll {options.poll_interval:g} s"
        else:
            bound = f"G3: about one poll interval, {options.poll_interval:g} s"
        self.line(
            f"takeover by {after.holder}: lease taken {after.after_action or 0:.1f} s after the "
            f"{signum.name} ({bound}); first run sent {max(sent, 0):.1f} s after it was due"
        )

    def outage(
        self, what: str, seen: Callable[[Snapshot, datetime], bool]
    ) -> tuple[datetime, datetime]:
        """Stop the demo's Redis for REDIS_OUTAGE seconds once ``seen`` holds; (stop, restart)."""
        self.demo.toggle_redis()
        stopped = timezone.now()
        self.wait(what, lambda s: seen(s, stopped), within=REDIS_OUTAGE + 5)
        self.wait(
            "the outage lasts",
            lambda s: (s.now - stopped).total_seconds() >= REDIS_OUTAGE,
            within=REDIS_OUTAGE + 5,
        )
        self.demo.toggle_redis()
        return stopped, timezone.now()

    def broker_outage(self) -> None:
        before = self.latest()
        assert before is not None
        self.line(
            f"now stop Redis for {REDIS_OUTAGE:g} s: with the database lease it is only the broker."
            " A leader that cannot publish for a second leaves the lease to a node that may reach"
            " it; when none can, the nodes back off instead of passing it around"
        )
        stopped, restarted = self.outage(
            "a slot recorded while the broker is down",
            lambda s, stopped: snapshot.run_count(status="pending", scheduled_for__gt=stopped) >= 1,
        )
        slots = snapshot.slots_between(ECHO_JOB, stopped, restarted)
        self.wait(
            "every slot of the outage run once the broker is back",
            lambda s: (
                snapshot.finished_slots(ECHO_JOB, slots) == len(slots)
                and not snapshot.run_count(status="pending", scheduled_for__lt=restarted)
            ),
            60,
        )
        missing = len(slots) - snapshot.recorded_slots(ECHO_JOB, slots)
        if missing:
            raise StoryFailed(f"{missing} of {len(slots)} slots of the outage have no run")
        latest = self.latest()
        assert latest is not None
        moves = latest.epoch - before.epoch
        # Each node may take the lease once before it knows the broker is down, and one takes it
        # when the broker is back: more than that is leadership passed around.
        if moves > self.demo.scheduler_count() + 1:
            raise StoryFailed(f"the lease changed hands {moves} times in one broker outage")
        self.line(
            f"the lease changed hands {moves} time(s); every slot of '{ECHO_JOB}' that fell due"
            f" in the outage ({len(slots)}) ran once, after the broker came back"
        )

    def every_slot_once(self) -> None:
        """Django's tasks on the database: across both failovers, every slot of the echo job
        since a scheduler first led has one run, and it succeeded on a db_worker. (Slots that
        fell due before any node led belong to the catch-up policy, as after any outage.)"""
        first = self.demo.narrator.leaderships[0]
        slots = snapshot.slots_between(ECHO_JOB, first.acquired_at, timezone.now())
        self.wait(
            f"every slot of '{ECHO_JOB}' since the start to end",
            lambda s: snapshot.finished_slots(ECHO_JOB, slots) == len(slots),
            60,
        )
        succeeded = snapshot.run_count(
            job__name=ECHO_JOB, scheduled_for__in=slots, status="success"
        )
        if succeeded != len(slots):
            raise StoryFailed(f"{len(slots) - succeeded} of {len(slots)} slots did not succeed")
        self.line(
            f"every slot of '{ECHO_JOB}' since {first.holder} first led ({len(slots)}) ran once on "
            "a db_worker, across both failovers: no Redis, no broker, only the database"
        )

    def redis_outage(self, ttl: float) -> None:
        before = self.latest()
        assert before is not None
        self.line(
            f"now stop Redis for {REDIS_OUTAGE:g} s: no lease can be held, nothing dispatches"
        )
        stopped, restarted = self.outage(
            "the outage is seen", lambda s, stopped: bool(s.redis_error)
        )
        # A leader may still publish until its lease would have run out (the broker need not be
        # this Redis); after that, nothing may be dispatched until Redis is back.
        dispatched_while_down = snapshot.run_count(
            queued_at__gt=stopped + timedelta(seconds=ttl), queued_at__lt=restarted
        )
        self.wait("a node leads again and catches up", self.new_leadership(before.epoch), 30)
        self.wait(
            "a run dispatched after the outage succeeds",
            lambda s: snapshot.run_count(status="success", queued_at__gte=restarted) >= 1,
            40,
        )
        if dispatched_while_down:
            raise StoryFailed(f"{dispatched_while_down} runs were dispatched while Redis was down")
        self.line("nothing was dispatched while Redis was down; the cluster caught up after it")
