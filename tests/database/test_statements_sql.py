"""The worker's claim, final record and heartbeat, as the SQL each database runs, kept in files
beside this test (``sql/<vendor>.sql``) so that a reviewer reads the statements themselves and a
change to them shows in the diff.

Each run of the suite compares the statements built for its database with that database's file;
``UPDATE_SQL=1`` writes the file instead (then read the diff). The finish statements are the ones
the ledger's transitions really build: each worker ending is called on a run with the statement
runner replaced, and the fields it writes are what the file shows.
"""

from __future__ import annotations

import os
import pathlib
import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_cluster_cron.ledger import heartbeats, statements, transitions
from django_cluster_cron.models import JobRun, RunStatus

pytestmark = pytest.mark.django_db

FILES = pathlib.Path(__file__).parent / "sql"

# The worker's endings, as the worker calls them (values do not matter: the fields do).
ENDINGS = {
    "success": lambda run: transitions.succeeded(run, result="r", duration=timedelta(0)),
    "failed": lambda run: transitions.failed(run, error="e", trace="", duration=timedelta(0)),
    "retrying": lambda run: transitions.retrying(
        run, retry_at=timezone.now(), error="e", trace="", duration=timedelta(0)
    ),
    "skipped": lambda run: transitions.skipped(run, reason="r", duration=timedelta(0)),
    "missed": lambda run: transitions.missed(run, reason="r"),
    "cancelled (stopped)": lambda run: transitions.stopped(
        run, error="e", trace="", duration=timedelta(0)
    ),
}


def _readable(sql: str) -> str:
    """One clause per line, one column per line in long lists."""
    for word in (" SET ", " FROM ", " WHERE ", " RETURNING ", " INNER JOIN ", " ON "):
        sql = sql.replace(word, "\n" + word.strip() + " ")
    sql = re.sub(r" AND ", "\n  AND ", sql)
    return re.sub(r', (?=["`])', ",\n    ", sql)


def _fields_written(ending: str, monkeypatch: pytest.MonkeyPatch) -> tuple[tuple[str, ...], bool]:
    """The fields the ending writes, and whether it records the run cancelled."""
    seen: list[tuple[tuple[str, ...], bool]] = []

    def capture(run_id: int, attempt: int, values: Any, token: str = "") -> int:
        seen.append((tuple(values), values["status"] == RunStatus.CANCELLED))
        return 1

    monkeypatch.setattr(transitions, "finish_run", capture)
    run = JobRun(pk=1, attempt=1, status=RunStatus.RUNNING, started_at=timezone.now())
    ENDINGS[ending](run)
    assert len(seen) == 1
    return seen[0]


def _rendered(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    connection, built = statements._for()
    parts = [
        f"-- The claim ({connection.vendor}): parameters are the new status, the worker, its pool,",
        "-- the backend's result id, the delivery's token, then the run id, task id, attempt and",
        "-- the claimable statuses.",
        _readable(built.claim_sql) + ";",
    ]
    if built.select_sql:
        parts += ["", "-- Then the run with its job (no UPDATE ... RETURNING here).", ""]
        parts += [_readable(built.select_sql) + ";"]
    for ending in ENDINGS:
        names, cancelled = _fields_written(ending, monkeypatch)
        sql, _fields = built.finish_sql(names, cancelled)
        parts += ["", f"-- The final record: {ending}.", _readable(sql) + ";"]
    beat = heartbeats._Beat(connection.alias, JobRun)
    match = beat.match(2)
    if beat.returning:
        parts += ["", "-- The heartbeat of two runs: stamped, with their cancels returned."]
        parts += [_readable(beat.update + match + beat.returned) + ";"]
    else:
        parts += ["", "-- The heartbeat of two runs with no cancel asked for."]
        parts += [_readable(beat.update + match + beat.not_cancelled) + ";"]
        parts += [
            "",
            "-- Only when it stamped fewer: which have a cancel asked for (then stamped).",
        ]
        parts += [_readable(beat.read + match) + ";"]
    return connection.vendor, "\n".join(parts) + "\n"


def test_the_claim_and_finish_statements_are_the_ones_in_the_file(monkeypatch):
    vendor, rendered = _rendered(monkeypatch)
    path = FILES / f"{vendor}.sql"
    if os.environ.get("UPDATE_SQL") == "1":
        FILES.mkdir(exist_ok=True)
        path.write_text(rendered)
    assert path.exists(), f"{path} is missing: run this test with UPDATE_SQL=1 and read the diff"
    assert rendered == path.read_text(), (
        f"the statements changed: run with UPDATE_SQL=1, read the diff of {path}, commit it"
    )


def test_the_claim_names_every_claimable_status_and_no_other():
    _connection, built = statements._for()
    placeholders = built.claim_sql.split(" IN (", 1)[1].split(")", 1)[0]
    assert placeholders.count("%s") == len(statements.CLAIMABLE)
