"""The HTTP server of the probes and /metrics (ops/httpserve.py) under a flood: connections past
the cap are closed at once without a thread, idle and dribbling clients are dropped, the busy
warning is rate-limited, and a normal request is answered once the flood is gone.

A real `run_scheduler` flooded on both ports: tests/cluster/test_probes.py.
"""

from __future__ import annotations

import gzip
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from django_cluster_cron.ops import httpserve, metrics
from tests.support.waiting import wait_for

LOGGER = logging.getLogger("tests.httpserve")
CAP = 4


class Hello(httpserve.Handler):
    def do_GET(self) -> None:
        self.send_body(200, "text/plain", b"hello")


@contextmanager
def serving(handler=Hello, **limits) -> Iterator[httpserve.BoundedHTTPServer]:
    server = httpserve.BoundedHTTPServer(
        ("127.0.0.1", 0), handler, name="test", logger=LOGGER, **limits
    ).start()
    try:
        yield server
    finally:
        server.stop()


def connect(server: httpserve.BoundedHTTPServer, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(
        ("127.0.0.1", server.port), timeout=30, source_address=(source, 0)
    )


def closed_by_server(sock: socket.socket, timeout: float = 30) -> bool:
    """Whether the server closes ``sock`` within ``timeout`` seconds (end of stream or reset);
    what it answered before closing is read and dropped."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def connection_threads() -> int:
    return sum(t.name == "cluster-cron-test-conn" for t in threading.enumerate())


def get(server: httpserve.BoundedHTTPServer, path: str = "/", **headers: str):
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, dict(response.headers), response.read()


def test_connections_past_the_cap_are_closed_at_once_without_a_thread(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER.name)
    with serving(max_connections=CAP, max_per_client=CAP, timeout=60) as server:
        idle = [connect(server) for _ in range(CAP)]
        wait_for(lambda: server.active == CAP, 30, "the first connections to be served")
        extra = [connect(server) for _ in range(3 * CAP)]
        try:
            for sock in extra:
                assert closed_by_server(sock), "a connection past the cap was kept open"
            assert server.active == CAP
            assert connection_threads() <= CAP
            busy = [r for r in caplog.records if r.getMessage().startswith("test.busy")]
            assert len(busy) == 1, "one warning for the whole flood"
            assert f"limit={CAP}" in busy[0].getMessage()
        finally:
            for sock in idle + extra:
                sock.close()
        wait_for(lambda: server.active == 0, 30, "the idle connections to end")
        assert get(server)[0] == 200


def test_one_client_cannot_take_every_connection():
    """A flood from one address fills its own share; another address is still served (Linux
    routes all of 127.0.0.0/8 to the loopback interface)."""
    with serving(max_connections=3 * CAP, max_per_client=CAP, timeout=60) as server:
        flood = [connect(server) for _ in range(CAP)]
        wait_for(lambda: server.active == CAP, 30, "the flood's first connections to be served")
        extra = [connect(server) for _ in range(2 * CAP)]
        try:
            for sock in extra:
                assert closed_by_server(sock), "one client got more than its share"
            assert server.active == CAP
            with connect(server, source="127.0.0.2") as other:
                other.sendall(b"GET / HTTP/1.0\r\n\r\n")
                other.settimeout(30)
                assert other.recv(64).startswith(b"HTTP/1.0 200")
        finally:
            for sock in flood + extra:
                sock.close()


def test_an_idle_connection_is_dropped_after_the_timeout():
    with serving(timeout=0.5) as server:
        opened = time.monotonic()
        with connect(server) as sock:
            assert closed_by_server(sock), "the idle connection was kept"
        assert time.monotonic() - opened >= 0.45, "dropped before its timeout"
        wait_for(lambda: server.active == 0, 30, "its thread to end")
        wait_for(lambda: connection_threads() == 0, 30, "no connection thread left")
        assert get(server)[0] == 200


def test_a_client_dribbling_its_request_is_dropped_at_the_request_deadline():
    """A byte every 0.1 s never trips the 60 s idle timeout: only the 1 s bound on the whole
    request ends it."""
    with serving(timeout=60, request_timeout=1) as server, connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.0\r\n")
        sock.settimeout(0.1)
        deadline = time.monotonic() + 30
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                sock.sendall(b"X")
                closed = sock.recv(4096) == b""
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                closed = True
        assert closed, "the dribbling client was kept past the request deadline"
        wait_for(lambda: server.active == 0, 30, "its thread to end")


def test_stop_ends_the_connections_in_progress():
    server = httpserve.BoundedHTTPServer(
        ("127.0.0.1", 0), Hello, name="test", logger=LOGGER, timeout=60
    ).start()
    try:
        sock = connect(server)
        wait_for(lambda: server.active == 1, 30, "the connection to be served")
    finally:
        server.stop()
    with sock:
        assert closed_by_server(sock), "stop() left a connection open"
    wait_for(lambda: connection_threads() == 0, 30, "no connection thread left")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()


def test_the_metrics_handler_serves_a_registry_and_nothing_else():
    registry = CollectorRegistry()
    Counter("served_things", "Things.", registry=registry).inc(3)
    Counter("other_things", "Others.", registry=registry).inc()
    with serving(metrics.scrape_handler(registry)) as server:
        for path in ("/metrics", "/"):
            status, headers, body = get(server, path)
            assert status == 200
            assert headers["Content-Type"].startswith("text/plain")
            families = {f.name: f for f in text_string_to_metric_families(body.decode())}
            assert families["served_things"].samples[0].value == 3
        _, headers, body = get(server, "/metrics", **{"Accept-Encoding": "gzip"})
        assert headers["Content-Encoding"] == "gzip"
        assert b"served_things_total 3.0" in gzip.decompress(body)
        _, _, body = get(server, "/metrics?name[]=other_things_total")
        assert b"other_things_total" in body
        assert b"served_things" not in body
        _, headers, _ = get(server, "/metrics", Accept="application/openmetrics-text")
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        with pytest.raises(urllib.error.HTTPError) as missing:
            get(server, "/nope")
        assert missing.value.code == 404
