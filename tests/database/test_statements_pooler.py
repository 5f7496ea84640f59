"""The worker's two statements behind a real transaction-mode pooler that does not keep prepared
statements (Debian's PgBouncer 1.18): a worker prepares them, the pooler hands another client the
same server connection, the second preparation collides; the worker turns preparing off for the
process, runs the statement again, and every claim and record lands once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from django.db import connection, connections

from django_cluster_cron.dbconn import close_own_connection
from django_cluster_cron.ledger import cursors, statements
from django_cluster_cron.models import JobRun, RunStatus
from tests.support.jobs import make_job, make_run
from tests.support.pgbouncer import PGBOUNCER, pgbouncer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements: PostgreSQL"),
    pytest.mark.skipif(
        PGBOUNCER is None, reason="Debian's pgbouncer is not installed (.ci/run installs it)"
    ),
]


@pytest.fixture
def pooler() -> Iterator[int]:
    """A throwaway PgBouncer in transaction mode with one server connection, in front of the
    suite's PostgreSQL; its port."""
    with pgbouncer("transaction", 1) as port:
        yield port


def test_behind_a_pooler_that_loses_prepared_statements_every_claim_and_record_lands_once(
    pooler, caplog
):
    runs = [make_run(make_job()) for _ in range(4)]
    settings = connections.settings[connection.alias]
    saved = (settings["HOST"], settings["PORT"])
    errors: list[BaseException] = []

    def work(run: JobRun, worker: str) -> None:
        """One worker thread: its own connection (through the pooler), a claim, a record."""
        try:
            claimed = statements.claim_run(run.pk, run.task_id, 1, worker)
            assert claimed is not None
            assert claimed.job.pk == run.job_id
            assert statements.finish_run(run.pk, 1, {"status": RunStatus.SUCCESS}) == 1
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)
        finally:
            close_own_connection()

    settings["HOST"], settings["PORT"] = "127.0.0.1", str(pooler)
    statements.use_own_connection()
    caplog.set_level(logging.WARNING, logger="django_cluster_cron.worker")
    try:
        # One after another, each thread a client of its own: the pooler's single server
        # connection already holds the first client's statements when the second prepares.
        for number, run in enumerate(runs):
            thread = threading.Thread(target=work, args=(run, f"w{number}:1"))
            thread.start()
            thread.join(timeout=60)
            assert not thread.is_alive()
    finally:
        statements.use_own_connection(False)
        settings["HOST"], settings["PORT"] = saved
        turned_off = not cursors._prepare[0]
        cursors._prepare[0] = True
    assert not errors, errors
    assert turned_off
    assert "run.prepared_statements_off" in caplog.text
    assert caplog.text.count("run.prepared_statements_off") == 1
    stored = {run.pk: run for run in JobRun.objects.filter(pk__in=[r.pk for r in runs])}
    assert {run.status for run in stored.values()} == {RunStatus.SUCCESS}
    assert [stored[run.pk].worker for run in runs] == [f"w{n}:1" for n in range(len(runs))]
