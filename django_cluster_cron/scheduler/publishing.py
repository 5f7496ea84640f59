"""The leader sends runs now, through the one send flow (:func:`django_cluster_cron.dispatch.
publish_now`): publish, say what happened, mark them published under its fence.

Runs due when they are recorded, runs a predecessor left unpublished, runs the outbox sweep
sends again and lost runs retried all go out here; runs recorded ahead go out at their instant
through :mod:`.armed`. Runs found unsent after their time (a predecessor's, the outbox's) are
first judged by their job's catch-up policy (:meth:`Publisher.publish_found`). Both report
lateness — how long after its due time a run on time reached the broker — into the same
:class:`Lateness`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime

from ..dispatch import Dispatcher, Sent, publish_now
from ..ledger.late import settle_unsent
from ..ledger.outbox import OutboxMessage
from ..models import RunTrigger
from ..ops import metrics
from ..ops.tracing import DispatchSpans
from .health import Health
from .leadership import Term

logger = logging.getLogger("django_cluster_cron.scheduler")


class Lateness:
    """How late the leader's on-time runs reached the broker: the metric, and the last batch's
    worst (the cluster page shows it)."""

    def __init__(self) -> None:
        self.last: float | None = None

    def observe(self, lags: list[float]) -> None:
        if lags:
            self.last = max(lags)
            metrics.observe_each(metrics.get().publish_latency, lags)


class Publisher:
    """Sends runs at once for the current term (nothing when there is none)."""

    def __init__(
        self,
        *,
        dispatcher: Dispatcher,
        term: Term,
        clock: Callable[[], datetime],
        health: Health,
        lateness: Lateness,
    ) -> None:
        self.dispatcher = dispatcher
        self.term = term
        self.clock = clock
        self.health = health
        self.lateness = lateness
        self.spans = DispatchSpans()

    def publish_found(self, messages: list[OutboxMessage]) -> None:
        """Publish runs found waiting (never sent, or sent and maybe lost): those that were
        never sent and are late go by their job's catch-up policy first — missed, or sent as
        catch-up runs (:mod:`django_cluster_cron.ledger.late`)."""
        fence = self.term.fence
        if not messages or fence is None:
            return
        settled = settle_unsent(messages, now=self.clock(), fence=fence)
        if settled.missed or settled.caught_up:
            logger.warning(
                "runs.found_late missed=%s caught_up=%s: recorded for their slot, not sent at "
                "their time (judged by their jobs' catch-up policies)",
                settled.missed,
                settled.caught_up,
            )
            slots = metrics.get().slots
            if settled.missed:
                slots.labels(outcome="missed").inc(settled.missed)
            for job_name, count in settled.missed_by_job.items():
                metrics.get().not_run(job_name, "catchup_window", count)
        self.publish(settled.send)

    def publish(self, messages: list[OutboxMessage]) -> None:
        fence = self.term.fence
        if not messages or fence is None:
            return
        messages = self.spans.start(messages, epoch=fence.epoch)

        def report(result: Sent) -> None:
            self._report(messages, result, fence.epoch)

        publish_now(
            self.dispatcher,
            messages,
            now=self.clock,
            fence=fence,
            node_id=self.term.node_id,
            report=report,
        )

    def _report(self, messages: list[OutboxMessage], result: Sent, epoch: int) -> None:
        """What a publish got out, before it is marked: the broker's health, the lateness of
        the on-time runs, the dispatch spans and log lines."""
        if result.failure is not None:  # the rest stay pending: the outbox sends them later
            self.health.down("broker", result.failure)
            metrics.get().publish_failures.inc(len(messages) - len(result.messages))
        else:
            self.health.up("broker")
        # An on-time slot's first send: a copy the outbox sends again is not the slot's lateness.
        sent = result.messages
        on_time = [m for m in sent if m.trigger == RunTrigger.SCHEDULE and not m.publish_count]
        lags: dict[int, float] = {}
        if on_time:
            now = self.clock()
            lags = {m.run_id: (now - m.due).total_seconds() for m in on_time}
            self.lateness.observe(list(lags.values()))
        self.spans.end([m.run_id for m in result.messages], lateness=lags.get)
        self.spans.end([m.run_id for m in messages], error=result.failure or "not sent")
        log_dispatched(result.messages, epoch)


def log_dispatched(messages: Iterable[OutboxMessage], epoch: int) -> None:
    """One ``run.dispatched`` line per run sent (skipped unless INFO is on: a burst is
    thousands of lines)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    for message in messages:
        logger.info(
            "run.dispatched job=%s slot=%s task_id=%s trigger=%s epoch=%s",
            message.job_id,
            message.scheduled_for.isoformat(),
            message.task_id,
            message.trigger,
            epoch,
        )
