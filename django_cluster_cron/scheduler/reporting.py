"""What a scheduler node tells the cluster about itself: its status report, every few seconds.

The report goes where the leases live (Redis: a short-lived key per node; the database: a row
per node; see :mod:`django_cluster_cron.coordination.reports`) and expires a few TTLs after the
node stops, so a node that died simply drops off the admin's cluster page
(:mod:`django_cluster_cron.ops.status` reads the reports).
"""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime

from ..coordination import NodeReports


class Reporter:
    """Publishes this node's status at most every ``reports.interval`` seconds."""

    def __init__(self, *, reports: NodeReports, node_id: str, ttl: float) -> None:
        self.reports = reports
        self.node_id = node_id
        self.ttl = ttl
        self._reported_at = 0.0

    def report_if_due(
        self,
        *,
        epoch: int | None,
        seen: datetime,
        last_tick: datetime | None,
        lag: float | None,
        clock_offset: float | None,
        clock_skewed: bool,
        prunable: dict[str, float] | None = None,
        ledger: dict[str, object] | None = None,
    ) -> bool | None:
        """Report if the interval has passed: whether the report was written (None: not due).
        Reports go where the leases live, so a failed one says the lease's backend failed."""
        if time.monotonic() - self._reported_at < self.reports.interval:
            return None
        self._reported_at = time.monotonic()
        payload = {
            "node": self.node_id,
            "role": "leader" if epoch is not None else "standby",
            "epoch": epoch,
            "seen": seen.isoformat(),
            "last_tick": last_tick.isoformat() if last_tick else None,
            "lag": lag,
            "clock_offset": clock_offset,
            "clock_skewed": clock_skewed,
            "prunable": prunable,
            "ledger": ledger,
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        return self.reports.report(self.node_id, payload, self.ttl)
