"""A TCP link that can be cut: a small proxy in front of a server, for partition tests.

``FaultyLink(port)`` listens on a free port of 127.0.0.1 and forwards every connection to the
server on ``port``. A test points one process at the link instead of the server, then:

* :meth:`refuse` — the far side is gone: connections made through the link are reset and new
  ones are refused (nothing listens on the link's port);
* :meth:`silence` — packets are lost: connections stay open, and whatever is sent waits in the
  link (as TCP would retransmit it) until :meth:`heal`; new connections are accepted and hear
  nothing;
* :meth:`heal` — traffic flows again, held bytes first;
* :meth:`retarget` — new connections go to another server, those open stay where they are (a
  failover behind a proxy or a DNS name: the old primary's sessions outlive the switch).

Only the processes pointed at the link are cut off; everything else reaches the server directly.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

PASS, SILENT, REFUSED = "pass", "silent", "refused"


class FaultyLink:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, port)
        self.mode = PASS
        self._changed = threading.Condition()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        listener = self._listen(0)
        self._listener: socket.socket | None = listener
        self.port = listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    # -- what a test does --------------------------------------------------------------------

    def refuse(self) -> None:
        """Reset every connection through the link and refuse new ones."""
        with self._changed:
            self.mode = REFUSED
            self._changed.notify_all()
            listener, self._listener = self._listener, None
            doomed, self._sockets = self._sockets, set()
        if listener is not None:
            listener.close()
        for sock in doomed:
            _reset(sock)

    def silence(self) -> None:
        """Hold every byte in either direction (connections stay open) until :meth:`heal`."""
        with self._changed:
            self.mode = SILENT
            self._changed.notify_all()

    def heal(self) -> None:
        with self._changed:
            if self.mode == REFUSED and self._listener is None:
                listener = self._listen(self.port)
                self._listener = listener
                threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
            self.mode = PASS
            self._changed.notify_all()

    def retarget(self, port: int, host: str = "127.0.0.1") -> None:
        """Send new connections to ``(host, port)``; open ones keep their server."""
        with self._changed:
            self.target = (host, port)

    def close(self) -> None:
        self._closed = True
        self.refuse()

    # -- the proxy ---------------------------------------------------------------------------

    @staticmethod
    def _listen(port: int) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        return listener

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # the listener was closed: refused, or the link closed
                return
            with self._changed:
                target = self.target
            try:
                upstream = socket.create_connection(target, timeout=10)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._changed:
                if self.mode == REFUSED:
                    _reset(client)
                    _reset(upstream)
                    continue
                self._sockets.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            with self._changed:
                # Silent: hold what was read until the link heals (or is cut for good).
                self._changed.wait_for(lambda: self.mode != SILENT)
                mode = self.mode
            if not data or mode == REFUSED:
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        with self._changed:
            cut = self.mode == REFUSED
        for sock in (src, dst):
            if cut:
                _reset(sock)
            else:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (the peer sees "connection reset", not an orderly end)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


# -- for tests --------------------------------------------------------------------------------

DEFAULT_PORTS = {"postgres": 5432, "postgresql": 5432, "mysql": 3306, "redis": 6379}


def port_of(url: str) -> int:
    """The TCP port a service URL names (its scheme's default when it names none)."""
    parts = urlsplit(url)
    return parts.port or DEFAULT_PORTS[parts.scheme]


def url_through(url: str, link: FaultyLink) -> str:
    """``url`` with its host and port replaced by ``link``'s."""
    parts = urlsplit(url)
    auth = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{link.port}"))


@pytest.fixture
def links() -> Iterator[Callable[[str], FaultyLink]]:
    """``links(url)``: a new cut-able link to the server of ``url``; all closed after the test."""
    made: list[FaultyLink] = []

    def make(url: str) -> FaultyLink:
        made.append(FaultyLink(port_of(url)))
        return made[-1]

    yield make
    for link in made:
        link.close()
