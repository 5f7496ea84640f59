"""A transaction-mode pooler between the app and PostgreSQL is found, and what lives in a
session falls back (issue 45, item 3): the database lease's session witness is neither taken nor
read (failover at the TTL), the change channel polls instead of LISTEN, and ``cluster_cron.W010``
says so. Behind a real PgBouncer (Debian's package) in each pool mode; a session-mode pool keeps
sessions and is left alone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection, connections

from django_cluster_cron import checks, dbconn
from django_cluster_cron.coordination.changes import DatabaseChanges, PollingSleeper
from django_cluster_cron.leases import witness
from tests.support.pgbouncer import PGBOUNCER, pgbouncer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL pooler"),
    pytest.mark.skipif(
        PGBOUNCER is None, reason="Debian's pgbouncer is not installed (.ci/run installs it)"
    ),
]


@contextmanager
def through(port: int | None) -> Iterator[str]:
    """The suite's database alias pointed at ``port`` (None: PostgreSQL itself), each probe
    made afresh; the alias."""
    alias = connection.alias
    settings = connections.settings[alias]
    saved = (settings["HOST"], settings["PORT"])
    if port is not None:
        settings["HOST"], settings["PORT"] = "127.0.0.1", str(port)
    dbconn._pooled.clear()
    try:
        yield alias
    finally:
        settings["HOST"], settings["PORT"] = saved
        dbconn._pooled.clear()


@pytest.mark.parametrize("pool_size", [1, 5])
def test_a_transaction_mode_pooler_is_found_and_the_session_parts_fall_back(pool_size, caplog):
    with pgbouncer("transaction", pool_size) as port, through(port) as alias:
        assert dbconn.behind_transaction_pooler(alias)
        assert not witness.supported(connections[alias])
        sleeper = DatabaseChanges().sleeper(0.5)
        assert isinstance(sleeper, PollingSleeper)
        found = checks.check_pooler(databases=[alias])
    assert [message.id for message in found] == ["cluster_cron.W010"]
    assert "lease TTL" in found[0].msg
    assert "changes.polling reason=pooler" in caplog.text


def test_a_session_mode_pool_and_postgresql_itself_keep_sessions():
    with pgbouncer("session", 5) as port, through(port) as alias:
        assert not dbconn.behind_transaction_pooler(alias)
        assert checks.check_pooler(databases=[alias]) == []
    with through(None) as alias:
        assert not dbconn.behind_transaction_pooler(alias)
        assert witness.supported(connections[alias])
