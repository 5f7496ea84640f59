"""One scheduler process's health, for Kubernetes probes and systemd's watchdog.

``run_scheduler --health-port 8081`` serves, from a thread of the process:

* ``GET /livez`` — 200 while the loop is turning: its last pass ended less than
  :func:`stuck_after` seconds ago. 503 means the process is stuck (a deadlock, a hung call):
  restart it. It does *not* fail when Redis or the database is down: restarting every scheduler
  during an outage helps nobody, and the loop rides outages out by itself.
* ``GET /readyz`` — 200 when the loop is turning *and* no dependency (the lease backend, the
  database, the broker) has been unreachable for longer than :func:`down_after` seconds.
* ``GET /healthz`` — the same as ``/readyz``.

Each answers JSON: the node, its role and epoch, seconds since the last pass, and what is down
since when. When the process runs under systemd with ``Type=notify`` and ``WatchdogSec=``, it
also sends ``READY=1`` once and ``WATCHDOG=1`` after every pass (``sd_notify`` over
``$NOTIFY_SOCKET``), so systemd restarts a stuck scheduler.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Any, Protocol

from . import httpserve

logger = logging.getLogger("django_cluster_cron.scheduler")


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _Timed(Protocol):
    @property
    def ttl(self) -> float: ...


class _Health(Protocol):
    @property
    def down_since(self) -> Mapping[str, float]: ...


class Scheduler(Protocol):
    """What the probe reads of the scheduler it serves (the loop in ``scheduler.loop``)."""

    @property
    def node_id(self) -> str: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def epoch(self) -> int | None: ...

    @property
    def backend(self) -> _Named: ...

    @property
    def lease(self) -> _Timed: ...

    @property
    def health(self) -> _Health: ...

    @property
    def last_pass(self) -> float | None: ...

    @property
    def longest_sleep(self) -> float:
        """The longest one pass of the loop may sleep (seconds)."""
        ...


def stuck_after(scheduler: Scheduler) -> float:
    """No pass for this long means the loop is stuck. A pass sleeps at most until the next
    renewal, poll, outbox sweep or outage back-off; a burst can keep one pass busy for a while."""
    return max(60.0, 6 * scheduler.longest_sleep)


def down_after(scheduler: Scheduler) -> float:
    """A dependency unreachable for this long makes the process not ready."""
    return max(30.0, 3 * scheduler.lease.ttl)


def process_health(scheduler: Scheduler) -> dict[str, Any]:
    now = time.monotonic()
    since_pass = None if scheduler.last_pass is None else now - scheduler.last_pass
    alive = since_pass is not None and since_pass <= stuck_after(scheduler)
    down = {name: round(now - since, 3) for name, since in scheduler.health.down_since.items()}
    ready = alive and all(seconds <= down_after(scheduler) for seconds in down.values())
    return {
        "node": scheduler.node_id,
        "role": "leader" if scheduler.is_leader else "standby",
        "epoch": scheduler.epoch,
        "lease": scheduler.backend.name,
        "seconds_since_last_pass": None if since_pass is None else round(since_pass, 3),
        "alive": alive,
        "ready": ready,
        "down_for_seconds": down,
    }


class ProbeServer:
    """The ``/livez``, ``/readyz`` and ``/healthz`` endpoints of one scheduler, on a thread (at
    most :data:`~.httpserve.MAX_CONNECTIONS` connections at once, each dropped after
    :data:`~.httpserve.TIMEOUT` seconds of silence: see :mod:`.httpserve`)."""

    def __init__(self, scheduler: Scheduler, host: str, port: int) -> None:
        self.scheduler = scheduler
        probe = self

        class Handler(httpserve.Handler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path not in ("/livez", "/readyz", "/healthz"):
                    self.send_error(404, "try /livez, /readyz or /healthz")
                    return
                body = process_health(probe.scheduler)
                ok = body["alive"] if path == "/livez" else body["ready"]
                self.send_body(200 if ok else 503, "application/json", json.dumps(body).encode())

        self.server = httpserve.BoundedHTTPServer(
            (host, port), Handler, name="health", logger=logger
        )

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> ProbeServer:
        self.server.start()
        logger.info("health.listening port=%s paths=/livez,/readyz,/healthz", self.port)
        return self

    def stop(self) -> None:
        self.server.stop()


def sd_notify(state: str) -> bool:
    """Send ``state`` to systemd if this process runs under it with a notify socket."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as exc:
        logger.debug("systemd.notify_failed state=%s error=%s", state, exc)
        return False
    return True
