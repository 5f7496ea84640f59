"""A throwaway MariaDB server on a free port, for tests that change a server-wide setting.

    server = MariaDBServer().start()   # mariadb-install-db into a temporary directory, then start
    use(server.url)                    # mysql://app@127.0.0.1:PORT/dcc (an ordinary user)
    server.root("SET GLOBAL read_only = 1")   # as root, through the server's socket
    server.close()                     # stop it and delete its files

The app's user ``app`` has every privilege on the database ``dcc`` and no administrative one, so
``read_only`` applies to it as to an application's user (root's READ_ONLY ADMIN would not). The
shared server of the suite is never touched. The binaries are Debian's (``mariadb-server``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

HOST = "127.0.0.1"
MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db"


class MariaDBUnavailable(RuntimeError):
    """No MariaDB server binaries here."""


def available() -> bool:
    return os.access(MARIADBD, os.X_OK) and os.access(INSTALL_DB, os.X_OK)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class MariaDBServer:
    def __init__(self) -> None:
        if not available():
            raise MariaDBUnavailable("no MariaDB server binaries (Debian package mariadb-server)")
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="dcc-mariadb-"))
        self.data = self.dir / "data"
        self.socket = self.dir / "mysqld.sock"
        self.log = self.dir / "server.log"
        self._user = "mysql" if os.geteuid() == 0 else None
        if self._user:
            shutil.chown(self.dir, self._user, self._user)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mysql://app@{HOST}:{self.port}/dcc"

    def _options(self) -> list[str]:
        found = [
            "--no-defaults",
            f"--datadir={self.data}",
            f"--socket={self.socket}",
            f"--port={self.port}",
            f"--bind-address={HOST}",
            f"--pid-file={self.dir / 'mysqld.pid'}",
            f"--log-error={self.log}",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=32M",
            "--innodb-flush-log-at-trx-commit=2",
        ]
        return [*found, f"--user={self._user}"] if self._user else found

    def start(self) -> MariaDBServer:
        if not self.data.exists():
            install = [
                INSTALL_DB,
                "--no-defaults",
                f"--datadir={self.data}",
                "--auth-root-authentication-method=normal",
            ]
            if self._user:
                install.append(f"--user={self._user}")
            subprocess.run(install, check=True, capture_output=True, timeout=120)
        self._process = subprocess.Popen(
            [MARIADBD, *self._options()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                self.root("SELECT 1")
                break
            if self._process.poll() is not None:
                raise MariaDBUnavailable(f"mariadbd exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)
        else:
            raise MariaDBUnavailable(f"mariadbd did not answer: {self.log.read_text()[-2000:]}")
        anonymous = self.root("SELECT Host FROM mysql.user WHERE User = ''")
        self.root(
            # The install's anonymous users would match before 'app' from this host.
            *(f"DROP USER ''@'{host}'" for (host,) in anonymous),
            "CREATE DATABASE IF NOT EXISTS dcc CHARACTER SET utf8mb4",
            "CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY ''",
            "GRANT ALL PRIVILEGES ON dcc.* TO 'app'@'%'",
        )
        return self

    def root(self, *statements: str) -> list[tuple[object, ...]]:
        """Run statements as root through the server's socket; the last one's rows."""
        import MySQLdb

        conn = MySQLdb.connect(unix_socket=str(self.socket), user="root", connect_timeout=5)
        try:
            cursor = conn.cursor()
            rows: list[tuple[object, ...]] = []
            for statement in statements:
                cursor.execute(statement)
                rows = list(cursor.fetchall() or [])
            conn.commit()
            return rows
        finally:
            conn.close()

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
