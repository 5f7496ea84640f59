"""Bounded waits on the broker for the scheduler's publishing connection.

Celery's broker connections wait without bound for an answer by default: kombu's Redis transport
passes no socket timeout to redis-py, and py-amqp sets no read or write timeout. A scheduler
publishing on a link that went silent (a firewall dropping packets) would block there until the
kernel gave up, many minutes, unable even to give its lease up. :func:`bound_broker_waits` adds
the transport options that bound those waits (:data:`BROKER_TIMEOUTS`) to the Celery app of the
scheduler process, leaving every option the project sets as it is. Workers are left as
configured: their consuming connection is Celery's own business.
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

# Per transport: connect within 5 s, give up on an answer after 10 s, TCP keepalive on.
BROKER_TIMEOUTS: dict[str, dict[str, Any]] = {
    "redis": {"socket_connect_timeout": 5, "socket_timeout": 10, "socket_keepalive": True},
    "amqp": {"read_timeout": 10, "write_timeout": 10},
}
# TCP_USER_TIMEOUT (Linux): unacknowledged data is given up after this many milliseconds.
if hasattr(socket, "TCP_USER_TIMEOUT"):
    BROKER_TIMEOUTS["amqp"]["socket_settings"] = {socket.TCP_USER_TIMEOUT: 10_000}

_KINDS = {
    "redis": "redis",
    "rediss": "redis",
    "sentinel": "redis",
    "amqp": "amqp",
    "amqps": "amqp",
    "pyamqp": "amqp",
}


def transport_kind(broker_url: str | None) -> str | None:
    """``"redis"`` or ``"amqp"`` for a broker URL of those transports, else None."""
    first = str(broker_url or "").split(";")[0].strip()
    return _KINDS.get(urlsplit(first).scheme.split("+")[0].lower())


def bound_broker_waits(app: Any) -> dict[str, Any]:
    """Add the :data:`BROKER_TIMEOUTS` the project's ``broker_transport_options`` lacks to
    ``app``'s configuration; returns the options added. Call before the first publish (the
    connection pool reads them when it connects)."""
    kind = transport_kind(app.conf.broker_url)
    if kind is None:
        return {}
    options = dict(app.conf.broker_transport_options or {})
    added = {k: v for k, v in BROKER_TIMEOUTS[kind].items() if k not in options}
    if added:
        app.conf.broker_transport_options = {**options, **added}
    return added
