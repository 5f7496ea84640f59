"""A throwaway PgBouncer (Debian's package) in front of the suite's PostgreSQL, on a free port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.pgserver import _free_port
from tests.support.waiting import wait_for

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None
)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


@contextmanager
def pgbouncer(
    pool_mode: str = "transaction",
    pool_size: int = 1,
    *,
    upstream: tuple[str, int] | None = None,
    user: str | None = None,
    max_clients: int = 20,
) -> Iterator[int]:
    """A PgBouncer in ``pool_mode`` with at most ``pool_size`` server connections per database,
    in front of ``upstream`` (host, port; default: the suite's PostgreSQL); its port."""
    assert PGBOUNCER is not None
    if upstream is None or user is None:
        from django.db import connection

        settings = connection.settings_dict
        upstream = upstream or (settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
        user = user or settings["USER"] or "postgres"
    home = Path(tempfile.mkdtemp(prefix="dcc-pgbouncer-"))
    home.chmod(0o777)  # PgBouncer refuses root: as root it runs as nobody and writes here
    port = _free_port()
    (home / "users.txt").write_text(f'"{user}" ""\n')
    (home / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={upstream[0]} port={upstream[1]}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {home / 'users.txt'}\n"
        f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\n"
        f"max_client_conn = {max_clients}\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {home / 'pgbouncer.log'}\npidfile = {home / 'pgbouncer.pid'}\n"
    )
    for name in ("users.txt", "pgbouncer.ini"):
        (home / name).chmod(0o644)
    command = [PGBOUNCER]
    if os.geteuid() == 0:
        command += ["-u", "nobody"]
    # What it prints goes to its log file as well: a pipe nobody reads would fill and stop it.
    process = subprocess.Popen(
        [*command, str(home / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(
            lambda: _accepts(port) or process.poll() is not None,
            30,
            "PgBouncer to listen",
        )
        log = home / "pgbouncer.log"
        assert process.poll() is None, log.read_text() if log.exists() else "PgBouncer exited"
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)
