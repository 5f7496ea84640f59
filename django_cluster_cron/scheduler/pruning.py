"""The leader's pruning of the ledger: each ended day summed up (one a pass, see
``ledger.summaries``), then a bounded pass (``PRUNE_BATCH_SIZE`` runs, each day summed
up first) at most every ``PRUNE_INTERVAL``, on a thread of its own with its own database
connection, so a pass never delays a tick; fenced like every write of the leader's, so a pass of
a term that has ended writes nothing. ``PRUNE_RUNS = False`` leaves pruning to ``prune_runs``:
the thread then only measures.

After each pass the oldest run past its retention (its age and its status's period) goes to the
metrics and to the leader's report (:attr:`Pruner.found`), which the health check reads; and so
does the ledger's size (:attr:`Pruner.ledger`: the total from the database's statistics, each
status counted up to a cap), which the run pages show instead of counting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import date, datetime

from django.db import Error, connections

from ..conf import app_settings
from ..ledger import counts, retention, summaries
from ..ledger.fence import Fence, FencedOut
from ..ops import metrics
from .leadership import Term

logger = logging.getLogger("django_cluster_cron.scheduler")

DAY = 86_400.0
# The longest a write of a pass waits for the tick to finish recording.
YIELD_MOST = 5.0


class Pruner:
    def __init__(self, *, term: Term, clock: Callable[[], datetime]) -> None:
        self.term = term
        self.clock = clock
        # Monotonic; the first pass waits an interval: a node taking over has more pressing
        # work, and a scheduler that lives a moment (run_scheduler --once) none.
        self.due_at = time.monotonic() + app_settings.PRUNE_INTERVAL
        self.thread: threading.Thread | None = None
        # The oldest run past its retention as the last pass left it: {"age": seconds, "days":
        # its period} ({} when none; None until measured).
        self.found: dict[str, float] | None = None
        # The ledger's size as the last pass measured it (counts.measure), for the pages.
        self.ledger: dict[str, object] | None = None
        # The ended days this process has summed up (or found summed up already).
        self.summed: set[date] = set()

    def start_if_due(self) -> None:
        """Start a pass if one is due and none is under way (the leader's sweeps call it)."""
        fence = self.term.fence
        if (
            fence is None
            or time.monotonic() < self.due_at
            or (self.thread is not None and self.thread.is_alive())
        ):
            return
        self.due_at = time.monotonic() + app_settings.PRUNE_INTERVAL
        self.thread = threading.Thread(
            target=self._in_thread, args=(fence,), name="cluster-cron-prune", daemon=True
        )
        self.thread.start()

    def _in_thread(self, fence: Fence) -> None:
        try:
            self.run_pass(fence)
        finally:
            connections.close_all()  # this thread's: a pass's thread does not come back

    def run_pass(self, fence: Fence) -> retention.Pruned | None:
        """One pass under ``fence``, then the metrics (None: the pass failed, or the term
        is over)."""
        started = time.monotonic()
        pruned = retention.Pruned()
        try:
            now = self.clock()
            self.sum_up_a_day(fence, now)
            if app_settings.PRUNE_RUNS:
                pruned = retention.prune(
                    now=now,
                    limit=app_settings.PRUNE_BATCH_SIZE,
                    fence=fence,
                    before_write=self.yield_to_tick,
                )
            # A pass that was not full left nothing past its retention: no second look.
            left = not app_settings.PRUNE_RUNS or pruned.full
            oldest = retention.oldest_prunable(self.clock()) if left else None
            self.ledger = counts.measure()
        except FencedOut:
            logger.info("prune.fenced epoch=%s", fence.epoch)
            return None
        except Error as exc:  # the next pass tries again; the loop has its own health
            logger.warning("prune.failed error=%s: %s", type(exc).__name__, exc)
            return None
        except Exception:  # a thread's traceback would go to stderr, unlabelled
            logger.exception("prune.failed")
            return None
        found = metrics.get()
        for status, count in pruned.by_status.items():
            found.runs_pruned.labels(status=status).inc(count)
        self.found = (
            {}
            if oldest is None
            else {"age": max(0.0, (now - oldest.slot).total_seconds()), "days": oldest.days}
        )
        found.prunable_age.set(self.found.get("age", 0))
        found.prunable_retention.set(self.found.get("days", 0) * DAY)
        if pruned.runs or pruned.summaries_dropped:
            logger.info(
                "prune.pass runs=%s by_status=%s summaries=%s summaries_dropped=%s seconds=%.2f",
                pruned.runs,
                ",".join(f"{s}:{n}" for s, n in sorted(pruned.by_status.items())),
                pruned.summaries,
                pruned.summaries_dropped,
                time.monotonic() - started,
            )
        return pruned

    def sum_up_a_day(self, fence: Fence, now: datetime) -> None:
        """Sum up the oldest ended day this process has not (under the fence: a deposed
        leader writes no summary)."""
        ended = summaries.ended_days(now)
        self.summed.intersection_update(ended)
        day = next((day for day in ended if day not in self.summed), None)
        if day is None:
            return
        step = retention.steps(fence, now, self.yield_to_tick)
        written = summaries.sum_up_day(day, now=now, step=step)
        self.summed.add(day)
        if written:
            logger.info("prune.summed day=%s jobs=%s", day.isoformat(), written)

    def yield_to_tick(self) -> None:
        """Wait while the tick records a slot's runs (at most YIELD_MOST seconds: a tick that
        records without end must not stop the pruning for good)."""
        if self.term is not None:
            self.term.quiet.wait(YIELD_MOST)

    def join(self, timeout: float | None = None) -> None:
        """Wait for a pass under way (the scheduler stopping)."""
        if self.thread is not None:
            self.thread.join(timeout)
