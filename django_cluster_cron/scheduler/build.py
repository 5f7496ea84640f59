"""A scheduler wired to the project: its lease backend, database and dispatcher."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from ..conf import NODE_ID_ENV, app_settings
from ..coordination import coordination_for
from ..dispatch import default_dispatcher
from ..leases import LEADER, LeaseBackend, get_backend
from .loop import Scheduler
from .recording import Recorder


def default_node_id() -> str:
    """``$CLUSTER_CRON_NODE_ID`` (e.g. a pod name) or ``hostname:pid``."""
    return os.environ.get(NODE_ID_ENV) or f"{socket.gethostname()}:{os.getpid()}"


def build_scheduler(
    *,
    node_id: str | None = None,
    ttl: float | None = None,
    poll_interval: float | None = None,
    stop: threading.Event | None = None,
    **overrides: Any,
) -> Scheduler:
    """A scheduler wired to the project's lease backend, database and dispatcher; keyword
    arguments of :class:`~.loop.Scheduler` override the parts (``backend``, ``sleeper``,
    ``recorder``, ``dispatcher``, ``clock``, ...)."""
    node = node_id or default_node_id()
    backend: LeaseBackend = overrides.pop("backend", None) or get_backend()
    coordination = overrides.pop("coordination", None) or coordination_for(backend)
    lease = backend.lease(LEADER, node, app_settings.LEASE_TTL if ttl is None else ttl)
    sleeper = overrides.pop("sleeper", None) or coordination.changes.sleeper(
        poll_interval or app_settings.POLL_INTERVAL
    )
    return Scheduler(
        node_id=node,
        lease=lease,
        recorder=overrides.pop("recorder", None) or Recorder(),
        dispatcher=overrides.pop("dispatcher", None) or default_dispatcher(),
        sleeper=sleeper,
        poll_interval=poll_interval,
        stop=stop,
        backend=backend,
        coordination=coordination,
        **overrides,
    )
