"""A throwaway PostgreSQL server on a free port, for tests that restart or crash it.

    server = PostgresServer().start()     # initdb into a temporary directory, then start
    use(server.url)                       # postgres://postgres@127.0.0.1:PORT/postgres
    server.restart(mode="immediate")      # a crash and recovery; "fast": a clean restart
    server.close()                        # stop it and delete its files

    standby = PostgresServer.standby_of(server, synchronous=True).start()   # streaming replica
    server.refuse_writes()                # demoted: its sessions stay open, writes fail (25006)
    standby.wait_replayed(server.wal_lsn()); standby.promote()              # a failover

The binaries come from ``$PG_BIN`` (a directory), then PATH, then /usr/lib/postgresql/*/bin (the
newest). PostgreSQL refuses to run as root: as root, it runs as the ``postgres`` user (runuser).
The shared server of the suite is never touched.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

HOST = "127.0.0.1"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries here (initdb, pg_ctl)."""


def find_bin() -> Path:
    given = os.environ.get("PG_BIN")
    candidates = [given] if given else []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))  # a link: the real folder
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    for folder in candidates:
        if folder and (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    raise PostgresUnavailable(
        "no PostgreSQL server binaries (initdb, pg_ctl): install the Debian package postgresql, "
        "or set PG_BIN to their directory"
    )


def _version(folder: str) -> float:
    try:
        return float(Path(folder).parent.name)
    except ValueError:
        return 0.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    def __init__(self) -> None:
        self.bin = find_bin()
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="dcc-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")

    @property
    def url(self) -> str:
        return f"postgres://postgres@{HOST}:{self.port}/postgres"

    def _run(self, *command: str, timeout: float = 120) -> None:
        full = [str(self.bin / command[0]), *command[1:]]
        if self._as_postgres:
            full = ["runuser", "-u", "postgres", "--", *full]
        subprocess.run(full, check=True, capture_output=True, timeout=timeout)

    def start(self) -> PostgresServer:
        if not self.data.exists():
            self._run(
                "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                "--no-sync",
            )  # fmt: skip
        options = (
            f"-p {self.port} -c listen_addresses={HOST} -k {self.dir} -c fsync=off "
            "-c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        return self

    @classmethod
    def standby_of(cls, primary: PostgresServer, synchronous: bool = False) -> PostgresServer:
        """A streaming standby of ``primary`` (a base backup, not started yet). ``synchronous``:
        the primary waits for it to flush before a commit returns (no acknowledged commit can
        be lost in a promote); else it may lag."""
        standby = cls()
        standby._run(
            "pg_basebackup", "-D", str(standby.data), "-h", HOST, "-p", str(primary.port),
            "-U", "postgres", "-X", "stream", "-R", "--checkpoint=fast", "-d",
            f"host={HOST} port={primary.port} user=postgres application_name=standby",
        )  # fmt: skip
        if synchronous:
            primary.sql("ALTER SYSTEM SET synchronous_standby_names = 'standby'")
            primary.sql("SELECT pg_reload_conf()")
        return standby

    def sql(self, statement: str, database: str = "postgres") -> list[tuple[object, ...]]:
        """Run one statement on this server (its own connection, autocommit); its rows."""
        import psycopg

        with psycopg.connect(
            host=HOST, port=self.port, user="postgres", dbname=database, autocommit=True,
            connect_timeout=10,
        ) as conn:  # fmt: skip
            cursor = conn.execute(statement)
            return list(cursor.fetchall()) if cursor.description else []

    def refuse_writes(self) -> None:
        """Demote in place: every session, those open included, refuses writes from its next
        transaction (SQLSTATE 25006), and reads go on — a primary a failover has demoted."""
        self.sql("ALTER SYSTEM SET default_transaction_read_only = on")
        self.sql("SELECT pg_reload_conf()")

    def wal_lsn(self) -> str:
        return str(self.sql("SELECT pg_current_wal_lsn()")[0][0])

    def wait_replayed(self, lsn: str, timeout: float = 60) -> None:
        """Until this standby has replayed up to ``lsn``."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            behind = self.sql(f"SELECT pg_wal_lsn_diff('{lsn}', pg_last_wal_replay_lsn())")
            if behind and behind[0][0] is not None and float(str(behind[0][0])) <= 0:
                return
            time.sleep(0.05)
        raise TimeoutError(f"the standby did not replay up to {lsn} in {timeout:g}s")

    def promote(self) -> None:
        """End recovery: this standby becomes a primary."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")

    def stop(self, mode: str = "fast") -> None:
        """``fast``: a clean shutdown (sessions ended); ``immediate``: a crash (recovery on the
        next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.SubprocessError):
                self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
