"""A small threaded HTTP server that a flood of connections cannot turn against its process.

The probe endpoints (``run_scheduler --health-port``) and ``/metrics`` (``--metrics-port``,
``WORKER_METRICS_PORT``) are served from threads of the scheduler or the worker. The standard
library's threading server starts a thread for every connection and waits on each for as long as
its client likes, so a few hundred idle connections pin as many threads and file descriptors in
the process, until it cannot open a connection to its broker or database. Here:

* each connection has a socket timeout (:data:`TIMEOUT`): a client that sends nothing for that
  long is dropped; and the whole request (request line and headers) must arrive within
  :data:`REQUEST_TIMEOUT`, so a client dribbling a byte at a time is dropped too;
* at most :data:`MAX_CONNECTIONS` connections are served at once, and at most
  :data:`MAX_PER_CLIENT` from one address, so one client flooding the port leaves room for the
  probes and scrapers of the others: one more is closed as soon as it is accepted, with no thread
  started and its descriptor released, and a warning (``<name>.busy``) is logged at most once
  every :data:`BUSY_LOG_EVERY` seconds, counting the connections closed since the last one.

Each connection answers one request (HTTP/1.0), on a daemon thread.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

# Seconds a connection may stay silent before it is dropped, and the longest the answer may take
# to be written. Probes and scrapers send their request at once and read the answer at once.
TIMEOUT = 5.0
# Seconds from the accept until the request line and headers have all been read.
REQUEST_TIMEOUT = 10.0
# Connections served at once, per server. A kubelet's probes, a pair of Prometheus servers and an
# operator's curl need a handful; each costs a thread and a descriptor in the process.
MAX_CONNECTIONS = 16
# Connections served at once from one client address: a flood from one host cannot take them all.
MAX_PER_CLIENT = 4
# The fewest seconds between two ``<name>.busy`` warnings of one server.
BUSY_LOG_EVERY = 60.0


class _DeadlineReader(io.RawIOBase):
    """Reads a socket, giving up once ``deadline`` (monotonic) has passed."""

    def __init__(self, sock: socket.socket, timeout: float, deadline: float) -> None:
        super().__init__()
        self.sock = sock
        self.timeout = timeout
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request took too long to arrive")
        self.sock.settimeout(min(self.timeout, remaining))
        try:
            return self.sock.recv_into(buffer)
        finally:
            self.sock.settimeout(self.timeout)  # writes keep the plain timeout


class Handler(BaseHTTPRequestHandler):
    """The base of this app's request handlers: a socket timeout, a bound on reading the
    request, nothing written to stderr, and :meth:`send_body` for a whole answer."""

    server: BoundedHTTPServer
    timeout = TIMEOUT

    def setup(self) -> None:
        super().setup()
        timeout = self.server.idle_timeout  # the server's ``timeout`` argument
        self.connection.settimeout(timeout)
        self.rfile.close()  # the reader made by the stream handler: replaced by one with a deadline
        deadline = time.monotonic() + self.server.request_timeout
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, timeout, deadline))

    def send_body(
        self, status: int, content_type: str, body: bytes, headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # probes every few seconds would flood the log; errors go to handle_error


class BoundedHTTPServer(HTTPServer):
    """An HTTP server with a thread per connection, at most ``max_connections`` of them.

    ``name`` names its threads (``cluster-cron-<name>`` accepts, ``cluster-cron-<name>-conn``
    serve) and its log events; ``logger`` is where it warns. ``start()`` serves from a daemon
    thread; ``stop()`` stops accepting, closes the listening socket and ends the connections in
    progress.
    """

    request_queue_size = 64  # a burst of connections waits in the kernel's queue, not in ours

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[Handler],
        *,
        name: str,
        logger: logging.Logger,
        max_connections: int = MAX_CONNECTIONS,
        max_per_client: int = MAX_PER_CLIENT,
        timeout: float = TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
        busy_log_every: float = BUSY_LOG_EVERY,
    ) -> None:
        self.name = name
        self.logger = logger
        self.max_connections = max_connections
        self.max_per_client = max_per_client
        self.idle_timeout = timeout
        self.request_timeout = request_timeout
        self.busy_log_every = busy_log_every
        self._lock = threading.Lock()
        self._open: dict[socket.socket, str] = {}  # connection -> its client's address
        self._closed_busy = 0  # connections closed for want of room since the last warning
        self._last_busy_log: float | None = None
        self._thread: threading.Thread | None = None
        super().__init__(address, handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def active(self) -> int:
        """Connections being served now."""
        with self._lock:
            return len(self._open)

    def start(self) -> BoundedHTTPServer:
        self._thread = threading.Thread(
            target=self.serve_forever, name=f"cluster-cron-{self.name}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
        self.server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        client = str(client_address[0]) if client_address else ""
        with self._lock:
            room = len(self._open) < self.max_connections and (
                sum(1 for c in self._open.values() if c == client) < self.max_per_client
            )
            if room:
                self._open[request] = client
        if not room:
            self.shutdown_request(request)
            self._busy()
            return
        thread = threading.Thread(
            target=self._serve,
            args=(request, client_address),
            name=f"cluster-cron-{self.name}-conn",
            daemon=True,
        )
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._open.pop(request, None)
            raise  # the caller logs it and closes the connection

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            with self._lock:
                self._open.pop(request, None)
            self.shutdown_request(request)

    def _busy(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._closed_busy += 1
            last = self._last_busy_log
            if last is not None and now - last < self.busy_log_every:
                return
            closed, self._closed_busy = self._closed_busy, 0
            self._last_busy_log = now
        self.logger.warning(
            "%s.busy port=%s limit=%s per_client=%s closed=%s: connections beyond the limits "
            "are closed at once",
            self.name,
            self.port,
            self.max_connections,
            self.max_per_client,
            closed,
        )

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away mid-request is routine; anything else is a bug worth a trace.
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            self.logger.debug("%s.connection_error error=%r", self.name, error)
        else:
            self.logger.exception("%s.request_failed", self.name)

    def server_close(self) -> None:
        super().server_close()
        with self._lock:
            connections = list(self._open)
        for connection in connections:  # wakes their threads, which close them
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
