"""The scheduler's parts, built and given their collaborators.

:func:`build_parts` makes the parts of one :class:`~.loop.Scheduler` from what its constructor
is given, filling in what it is not given from the project (the lease backend and its
coordination, the database's clock, the settings): the term over the lease; the publisher and
the armed sender, which share the term, the health and the lateness; the batches; the sweeps;
the clock watch and the reporter. The term calls the loop back when it ends (``on_term_end``)
and when it finds the database went back (``on_went_back``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError, connections
from django.utils import timezone

from ..conf import app_settings
from ..coordination import Coordination, coordination_for
from ..core.clock import OffsetClock
from ..core.uncertain import WentBack
from ..dispatch import Dispatcher
from ..leases import Lease, LeaseBackend, get_backend
from .armed import ArmedSender
from .batches import Batches
from .clock import ClockWatch
from .health import Health
from .leadership import Term
from .publishing import Lateness, Publisher
from .recording import Recorder
from .reporting import Reporter
from .sweeps import Sweeps


@dataclass(frozen=True)
class Parts:
    backend: LeaseBackend
    coordination: Coordination
    clock: Callable[[], datetime]
    poll_interval: float
    stop: threading.Event
    health: Health
    term: Term
    lateness: Lateness
    publisher: Publisher
    sender: ArmedSender
    batches: Batches
    sweeps: Sweeps
    clock_watch: ClockWatch
    reporter: Reporter


def build_parts(
    *,
    node_id: str,
    lease: Lease,
    recorder: Recorder,
    dispatcher: Dispatcher,
    clock: Callable[[], datetime] | None,
    renew_interval: float | None,
    poll_interval: float | None,
    batch_size: int | None,
    stop: threading.Event | None,
    backend: LeaseBackend | None,
    coordination: Coordination | None,
    lookahead: timedelta | None,
    on_term_end: Callable[[], object],
    on_went_back: Callable[[WentBack], object],
) -> Parts:
    """The parts of one scheduler; ``None`` means the project's default (see the settings)."""
    backend = backend or get_backend()
    coordination = coordination or coordination_for(backend)
    # "Now" is the database's time (see .clock); tests pass a plain callable.
    now = clock or OffsetClock(host=timezone.now, warn_after=app_settings.CLOCK_SKEW_WARNING)
    poll_interval = poll_interval or app_settings.POLL_INTERVAL
    batch_size = batch_size or app_settings.BATCH_SIZE
    stop = stop or threading.Event()
    health = Health()
    term = Term(
        node_id=node_id,
        lease=lease,
        backend=backend,
        health=health,
        renew_interval=renew_interval or min(app_settings.RENEW_INTERVAL, lease.ttl / 3),
        on_end=on_term_end,
        on_released=lambda: coordination.changes.publish("lease:released"),
        on_database_error=reset_connections,
        reach_broker=getattr(dispatcher, "reach", None),
        on_went_back=on_went_back,
    )
    lateness = Lateness()
    publisher = Publisher(
        dispatcher=dispatcher, term=term, clock=now, health=health, lateness=lateness
    )
    sender = ArmedSender(
        dispatcher=dispatcher,
        term=term,
        clock=now,
        health=health,
        publisher=publisher,
        lateness=lateness,
        batch_size=batch_size,
        lookahead_runs=app_settings.LOOKAHEAD_RUNS,
    )
    batches = Batches(
        node_id=node_id,
        term=term,
        recorder=recorder,
        publisher=publisher,
        sender=sender,
        clock=now,
        stop=stop,
        batch_size=batch_size,
        lookahead=app_settings.LOOKAHEAD if lookahead is None else lookahead,
        lookahead_runs=app_settings.LOOKAHEAD_RUNS,
    )
    return Parts(
        backend=backend,
        coordination=coordination,
        clock=now,
        poll_interval=poll_interval,
        stop=stop,
        health=health,
        term=term,
        lateness=lateness,
        publisher=publisher,
        sender=sender,
        batches=batches,
        sweeps=Sweeps(term=term, clock=now, publisher=publisher, batch_size=batch_size),
        clock_watch=ClockWatch(now, node_id),
        reporter=Reporter(
            reports=coordination.reports,
            node_id=node_id,
            ttl=max(30.0, poll_interval * 3, lease.ttl * 3),
        ),
    )


def reset_connections() -> None:
    """Close this thread's database connections: the next statement opens new ones (after an
    error, maybe to another server)."""
    for connection in connections.all(initialized_only=True):
        with contextlib.suppress(DatabaseError):
            connection.close()
