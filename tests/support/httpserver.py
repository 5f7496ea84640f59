"""An HTTP server on 127.0.0.1 that records what it receives: the stand-in for a monitoring
service's endpoint (Sentry's ingest, a ping URL) in the tests of the monitors and of what
error trackers see; and the real sentry-sdk pointed at it (:func:`sentry_stand_in`)."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class RecordingServer:
    """An HTTP server on 127.0.0.1 and a free port that records every request: (method, path,
    body, headers), the body un-gzipped. ``status`` maps a path prefix to the status it answers
    (200 otherwise); ``hold`` (an Event) keeps every request waiting until it is set."""

    def __init__(self, status: dict[str, int] | None = None) -> None:
        self.requests: list[tuple[str, str, bytes, dict[str, str]]] = []
        self.status = status or {}
        self.hold: threading.Event | None = None
        self.lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                elif self.headers.get("Content-Encoding") == "br":
                    import brotli  # type: ignore[import-not-found]

                    body = brotli.decompress(body)
                if recorder.hold is not None:
                    recorder.hold.wait(30)
                with recorder.lock:
                    recorder.requests.append((self.command, self.path, body, dict(self.headers)))
                code = next(
                    (c for prefix, c in recorder.status.items() if self.path.startswith(prefix)),
                    200,
                )
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_HEAD = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> RecordingServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()

    def seen(self) -> list[tuple[str, str, bytes, dict[str, str]]]:
        with self.lock:
            return list(self.requests)

    def paths(self) -> list[str]:
        return [path for _, path, _, _ in self.seen()]


@contextmanager
def sentry_stand_in(integrations: Sequence[Any] = (), **options: Any) -> Iterator[RecordingServer]:
    """The real sentry-sdk, initialised with a DSN on a local :class:`RecordingServer` standing
    in for Sentry's ingest endpoint (only the ``integrations`` given); closed afterwards."""
    import sentry_sdk

    with RecordingServer() as server:
        sentry_sdk.init(
            dsn=f"http://public@127.0.0.1:{server.port}/1",
            default_integrations=False,
            auto_enabling_integrations=False,
            integrations=list(integrations),
            **options,
        )
        try:
            yield server
        finally:
            sentry_sdk.flush(10)
            sentry_sdk.get_client().close()
            sentry_sdk.get_global_scope().set_client(None)


def envelope_items(body: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """The items of a Sentry envelope: a header line, then per item a header line and a
    payload (``length`` bytes if its header says, else up to the next newline)."""
    items = []
    rest = body.split(b"\n", 1)[1] if b"\n" in body else b""
    while rest.strip():
        line, rest = rest.split(b"\n", 1) if b"\n" in rest else (rest, b"")
        header = json.loads(line)
        if "length" in header:
            payload, rest = rest[: header["length"]], rest[header["length"] + 1 :]
        else:
            payload, rest = rest.split(b"\n", 1) if b"\n" in rest else (rest, b"")
        items.append((header, payload))
    return items


def sentry_items(server: RecordingServer, kind: str) -> list[dict[str, Any]]:
    """The payloads of the Sentry envelope items of this ``kind`` (``event``, ``check_in``…)."""
    return [
        json.loads(payload)
        for _method, path, body, _headers in server.seen()
        if path.startswith("/api/1/envelope/")
        for header, payload in envelope_items(body)
        if header.get("type") == kind
    ]
