"""The leader after the database went back: each slot of the uncertain window decided, logged
and counted (the deciding: :mod:`django_cluster_cron.ledger.uncertain`)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from ..core.uncertain import WentBack
from ..ledger.fence import Fence
from ..ledger.uncertain import Settled, settle_uncertain
from ..ops import metrics

logger = logging.getLogger("django_cluster_cron.scheduler")


def decide_uncertain(
    went: WentBack,
    *,
    fence: Fence,
    now: datetime,
    node_id: str,
    ttl: timedelta,
    lookahead: timedelta,
) -> Settled:
    """Before the term dispatches anything: the window's slots by their jobs' ``on_uncertain``."""
    settled = settle_uncertain(
        went, fence=fence, now=now, node_id=node_id, ttl=ttl, lookahead=lookahead
    )
    found = metrics.get().uncertain
    found.labels(decision="skip").inc(settled.skipped + settled.withdrawn)
    found.labels(decision="run").inc(settled.run + settled.again)
    logger.error(
        "runs.uncertain node=%s window=%s..%s skipped=%s run=%s withdrawn=%s again=%s: the fate "
        "of these slots was lost with the database's last writes; each job's on_uncertain "
        "decided",
        node_id,
        _stamp(settled.start),
        _stamp(settled.end),
        settled.skipped,
        settled.run,
        settled.withdrawn,
        settled.again,
    )
    return settled


def _stamp(at: datetime | None) -> str:
    return "-" if at is None else at.isoformat(timespec="seconds")
