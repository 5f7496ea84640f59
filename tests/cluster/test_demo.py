"""The terminal demo end to end: `scripts/demo.sh --script` plays the scripted story as CI does
— a throwaway Redis, a SQLite file of its own, a worker, schedulers that get SIGKILLed and
SIGTERMed, a Redis outage; or, with TASKS=django, three schedulers and two db_workers on the
database alone — and then no process it started is left (each carries a marker in its
environment).

Its narration and screen are tests/database/test_demo_screen.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_database

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _processes_with(marker: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:  # gone, or not ours to read
            continue
    return found


@pytest.mark.timeout(300)
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="checks for orphans through /proc")
@pytest.mark.parametrize(
    ("lease", "tasks", "args"),
    [("redis", "celery", []), ("database", "celery", ["--script"]), ("", "django", ["--script"])],
    ids=["redis-piped", "database-script", "django-tasks-script"],
)
def test_scripted_story_plays_to_the_end_and_leaves_no_process(
    tmp_path: Path, lease: str, tasks: str, args: list[str]
) -> None:
    """Asked for (--script), or because the output is a pipe: the first says why."""
    marker = f"DEMO_TEST_MARKER={uuid.uuid4().hex}"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL", "DEMO_REDIS_PORT")
    }
    env.update(
        DEMO_SKIP_BOOTSTRAP="1",
        DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        DEMO_PORT=str(_free_port()),
        DEMO_TEST_MARKER=marker.split("=", 1)[1],
        LEASE=lease or "redis",
        TASKS=tasks,
        # The demo keeps its logs (and its Redis its directory) under the temporary directory:
        # the test's own, so nothing is left in /tmp.
        TMPDIR=str(tmp_path),
    )
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh"), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    lines = result.stdout.splitlines()
    if not args:  # piped: the first line says why there is no live screen
        assert lines[0].startswith("[demo] the output is not a terminal, so the demo plays"), lines
    assert f"http://127.0.0.1:{env['DEMO_PORT']}/admin/ (login admin / admin)" in result.stdout
    assert "story complete" in result.stdout, output
    assert result.stdout.count("takeover by demo-") == 2, output
    assert "after the SIGKILL" in result.stdout
    assert "after the SIGTERM" in result.stdout
    if tasks == "django":
        # The database is the only server: no Redis started, no Celery worker, two db_workers.
        assert "ran once on a db_worker, across both failovers" in result.stdout, output
        assert "the demo starts its own Redis" not in output, output
        logs = Path(next(tmp_path.glob("cluster-cron-demo-*")))
        assert sorted(p.name for p in logs.glob("db-worker-*.log")) == [
            "db-worker-1.log",
            "db-worker-2.log",
        ]
        assert not (logs / "celery-worker.log").exists()
        assert not (logs / "redis.log").exists()
    elif lease == "redis":
        assert "nothing was dispatched while Redis was down" in result.stdout, output
    else:
        assert "every slot of 'echo every 5 seconds' that fell due" in result.stdout, output
        assert "lease: the database" in output, output
    assert _processes_with(marker) == []
