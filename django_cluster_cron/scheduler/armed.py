"""The leader's runs recorded ahead, their messages built, waiting for their instant.

In memory only, and only while this node leads: the run rows are the outbox. A leader that
steps down forgets them (another leader takes them over from the rows, see
:meth:`ArmedSender.take_over`), and a run an operator withdrew or cancelled meanwhile is dropped
by the check made right before sending.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from django.db import DatabaseError

from ..dispatch import Dispatcher, Prepared, SendFailed, mark_prepared_sent, prepare, send_prepared
from ..ledger import outbox
from ..ledger.outbox import OutboxMessage
from ..ops import metrics
from ..ops.tracing import DispatchSpans
from .health import Health
from .leadership import Term
from .publishing import Lateness, Publisher

logger = logging.getLogger("django_cluster_cron.scheduler")

# Runs recorded ahead are checked and sent in slices of about this many at their instant.
SEND_SLICE = 5_000
# How long before an instant its runs recorded ahead are checked and their messages unpacked,
# so that at the instant itself they only go out (seconds).
SEND_EARLY = 0.05
SEND_EARLY_DELTA = timedelta(seconds=SEND_EARLY)


class Armed:
    """Prepared groups by due time, earliest first; ``count`` is the runs they hold."""

    def __init__(self) -> None:
        self._heap: list[tuple[datetime, int, Prepared]] = []
        self._order = itertools.count()
        self.count = 0

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, groups: Sequence[Prepared]) -> None:
        for group in groups:
            heapq.heappush(self._heap, (group.due, next(self._order), group))
            self.count += len(group)

    def earliest(self) -> datetime | None:
        return self._heap[0][0] if self._heap else None

    def take_due(self, now: datetime, limit: int) -> list[Prepared]:
        """The groups due by ``now``, earliest first, about ``limit`` runs at most (whole
        groups: at least one)."""
        taken: list[Prepared] = []
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


class ArmedSender:
    """The leader's side of the runs it recorded ahead: build their messages, send them at their
    instant, record them sent, and take over a predecessor's."""

    def __init__(
        self,
        *,
        dispatcher: Dispatcher,
        term: Term,
        clock: Callable[[], datetime],
        health: Health,
        publisher: Publisher,
        lateness: Lateness,
        batch_size: int,
        lookahead_runs: int,
    ) -> None:
        self.dispatcher = dispatcher
        self.term = term
        self.clock = clock
        self.health = health
        self.publisher = publisher
        self.lateness = lateness
        self.batch_size = batch_size
        self.lookahead_runs = lookahead_runs
        self.armed = Armed()
        # Runs sent this pass, not yet recorded sent: (run ids, when they went out).
        self.unmarked: list[tuple[list[int], datetime]] = []
        # Set when a term begins: the predecessor's unpublished runs are taken over first.
        self.taking_over = False
        self.spans = DispatchSpans()

    def forget(self) -> None:
        """The term ended: the rows stay, the next leader takes them over."""
        self.armed.clear()
        self.unmarked = []
        self.spans.end_all("not sent: the term ended first (the next leader sends it)")

    def arm(self, messages: list[OutboxMessage]) -> None:
        """Build the messages of runs recorded ahead and keep them for their instant."""
        if messages and self.term.is_leader:
            messages = self.spans.start(messages, epoch=self.term.epoch)
            self.armed.add(prepare(self.dispatcher, messages))
            metrics.get().armed.set(self.armed.count)

    def send_due(self) -> None:
        """Send the prepared messages that are due: just before their instant, check their runs
        are still there to be sent (not withdrawn, cancelled, or sent by another leader) and
        unpack them; at the instant, send them — slice after slice, and only then record them
        sent. None goes out before its due time."""
        pushed: list[tuple[list[Prepared], list[int], datetime]] = []
        try:
            self._send_due_slices(pushed)
        finally:
            for groups, sent, at in pushed:  # after the whole burst is out
                self._report_sent(groups, set(sent), at)
                # Recorded sent at the end of the pass: after the rest of the instant's work
                # (runs not recorded ahead), which a long UPDATE must not hold up.
                self.unmarked.append((sent, at))

    def _send_due_slices(self, pushed: list[tuple[list[Prepared], list[int], datetime]]) -> None:
        while self.armed and self.term.is_leader:
            groups = self.armed.take_due(self.clock() + SEND_EARLY_DELTA, SEND_SLICE)
            if not groups:
                return
            if not self.term.fresh_or_renewed():
                return
            run_ids = [run_id for group in groups for run_id in group.run_ids]
            try:
                keep = outbox.unpublished(run_ids)
            except DatabaseError:
                self.armed.add(groups)  # unchecked: not sent; tried again once it is back
                raise
            for group in groups:
                group.unpack()
            if len(keep) < len(run_ids):
                logger.info("runs.withdrawn_before_sending count=%s", len(run_ids) - len(keep))
            early = False
            instants = [list(same) for _due, same in itertools.groupby(groups, lambda g: g.due)]
            for index, same in enumerate(instants):
                if not self._wait_until(same[0].due):
                    # This clock has not got there (a test's): later, checked again then.
                    self.armed.add([group for rest in instants[index:] for group in rest])
                    early = True
                    break
                sent = self._send_groups(same, keep)
                pushed.append((same, sent, self.clock()))
                for group in same:  # a burst's payloads are not kept until it is all out
                    group.drop_payloads()
            metrics.get().armed.set(self.armed.count)
            if early:
                return

    def mark_sent(self) -> None:
        """Record the prepared messages sent this pass as sent (``queued``), each instant's
        with when it went out."""
        sent, self.unmarked = self.unmarked, []
        fence = self.term.fence
        if sent and fence is not None:
            mark_prepared_sent(sent, fence=fence, node_id=self.term.node_id)

    def _wait_until(self, due: datetime) -> bool:
        """Sleep until ``due`` (at most SEND_EARLY); False if the clock is not there then."""
        wait = (due - self.clock()).total_seconds()
        if wait > 0:
            time.sleep(min(wait, SEND_EARLY))
        return self.clock() >= due

    def _send_groups(self, groups: list[Prepared], keep: set[int]) -> list[int]:
        try:
            sent = send_prepared(self.dispatcher, groups, keep)
        except SendFailed as exc:  # the rest stay pending: the outbox sends them later
            self.health.down("broker", exc.cause)
            metrics.get().publish_failures.inc(
                sum(1 for g in groups for run_id in g.run_ids if run_id in keep) - len(exc.sent)
            )
            return exc.sent
        self.health.up("broker")
        return sent

    def _report_sent(self, groups: list[Prepared], sent: set[int], now: datetime) -> None:
        """Lateness (sent at ``now``), the dispatch spans and log lines of prepared messages."""
        self.lateness.observe(
            [
                (now - group.due).total_seconds()
                for group in groups
                for run_id in group.run_ids
                if run_id in sent
            ]
        )
        if self.spans.open:
            for group in groups:
                late = (now - group.due).total_seconds()
                ids = [r for r in group.run_ids if r in sent]
                self.spans.end(ids, lateness=dict.fromkeys(ids, late).get)
                self.spans.end(
                    [r for r in group.run_ids if r not in sent],
                    error="not sent (withdrawn, or the broker failed: the outbox sends it)",
                )
        if not logger.isEnabledFor(logging.INFO):
            return
        for group in groups:
            for index, run_id in enumerate(group.run_ids):
                if run_id in sent:
                    logger.info(
                        "run.dispatched job=%s slot=%s task_id=%s trigger=schedule epoch=%s "
                        "ahead=1",
                        group.job_ids[index],
                        group.slot(index).isoformat(),
                        group.task_id(index),
                        self.term.epoch,
                    )

    def take_over(self) -> None:
        """A new leader takes over runs recorded and never published: its predecessor's runs
        recorded ahead, or runs recorded just before a crash. Due ones are published now (those
        past their time as their jobs' catch-up policies say: :meth:`Publisher.publish_found`),
        the others prepared for their instant (up to the run budget; the outbox sweep covers
        the rest)."""
        self.taking_over = False
        after: tuple[datetime, int] | None = None
        adopted = 0
        budget = max(self.lookahead_runs, self.batch_size)
        while self.term.is_leader and adopted < budget:
            messages = outbox.unpublished_runs(after=after, limit=self.batch_size)
            if not messages:
                break
            adopted += len(messages)
            after = (messages[-1].scheduled_for, messages[-1].run_id)
            now = self.clock()
            self.publisher.publish_found([m for m in messages if m.due <= now])
            self.arm([m for m in messages if m.due > now])
            if len(messages) < self.batch_size:
                break
        if adopted:
            logger.warning("runs.taken_over node=%s count=%s", self.term.node_id, adopted)
