"""The app's own database connections (the database lease's, a worker's claim and record) do not
wait forever on a link that went silent: connecting gives up, and on MySQL/MariaDB so does a
statement whose answer never comes. The link is a real TCP proxy that stops passing bytes
(tests/support/netfault.py)."""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection, connections

from django_cluster_cron.dbconn import (
    TIMEOUT_OPTIONS,
    close_own_connection,
    own_connection,
    with_timeouts,
)
from tests.support.netfault import FaultyLink

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

PORTS = {"postgresql": 5432, "mysql": 3306}


@pytest.fixture
def link():
    if connection.vendor not in PORTS:
        pytest.skip(f"a {connection.vendor} database is not reached over TCP")
    made = FaultyLink(int(connection.settings_dict.get("PORT") or PORTS[connection.vendor]))
    yield made
    made.close()


def through(link: FaultyLink):
    """A connection made as the app makes its own, to the test database through ``link``."""
    wrapper = connections.create_connection("default")
    settings = {**wrapper.settings_dict, "PORT": str(link.port), "HOST": "127.0.0.1"}
    wrapper.settings_dict = with_timeouts(settings, wrapper.vendor)
    return wrapper


def test_the_apps_own_connection_carries_the_timeouts_and_the_orms_does_not_change():
    if connection.vendor not in TIMEOUT_OPTIONS:
        pytest.skip("SQLite opens a file: there is no link to wait on")
    try:
        own = own_connection("default")
        options = own.settings_dict["OPTIONS"]
        for name, value in TIMEOUT_OPTIONS[connection.vendor].items():
            assert options[name] == value
        if connection.vendor == "postgresql":
            # What libpq itself was given, read back from the live connection.
            live = own.connection.info.get_parameters()
            assert live["keepalives_idle"] == "5"
            assert live["tcp_user_timeout"] == "10000"
            assert live["connect_timeout"] == "5"
        assert "keepalives" not in connections["default"].settings_dict.get("OPTIONS", {})
        assert "read_timeout" not in connections["default"].settings_dict.get("OPTIONS", {})
    finally:
        close_own_connection("default")


def test_an_option_the_project_sets_is_kept():
    found = with_timeouts({"OPTIONS": {"connect_timeout": 30}}, "postgresql")
    assert found["OPTIONS"]["connect_timeout"] == 30
    assert found["OPTIONS"]["tcp_user_timeout"] == 10_000


def test_connecting_through_a_silent_link_gives_up(link):
    link.silence()
    wrapper = through(link)
    with pytest.raises(OperationalError):
        wrapper.ensure_connection()
    wrapper.close()


def test_a_statement_on_a_link_gone_silent_gives_up_on_mysql(link):
    if connection.vendor != "mysql":
        pytest.skip(
            "libpq has no read timeout: on PostgreSQL a silent link is ended by TCP keepalive "
            "and tcp_user_timeout, which a proxy that keeps the TCP connection alive cannot show"
        )
    wrapper = through(link)
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT 1")
    link.silence()
    with pytest.raises(OperationalError), wrapper.cursor() as cursor:
        cursor.execute("SELECT 1")
    wrapper.close()


def test_the_scheduler_asks_the_server_to_end_a_session_silent_inside_a_transaction():
    """A leader cut off inside a fenced transaction holds the leader row's lock, which the next
    leader's epoch bump waits for: the server ends such a session after SILENT_LINK_TIMEOUT."""
    from django_cluster_cron.dbconn import SILENT_LINK_TIMEOUT, bound_server_waits_of_this_process

    if connection.vendor == "sqlite" or (
        connection.vendor == "mysql" and not getattr(connection, "mysql_is_mariadb", False)
    ):
        pytest.skip("only PostgreSQL and MariaDB end a session idle inside a transaction")
    connection.ensure_connection()
    bound_server_waits_of_this_process()  # the open connection, and every later one
    fresh = connections.create_connection("default")
    try:
        for wrapper in (connection, fresh):
            with wrapper.cursor() as cursor:
                if connection.vendor == "postgresql":
                    cursor.execute("SHOW idle_in_transaction_session_timeout")
                    assert cursor.fetchone()[0] == f"{SILENT_LINK_TIMEOUT}s"
                else:
                    cursor.execute("SELECT @@SESSION.idle_transaction_timeout")
                    assert int(cursor.fetchone()[0]) == SILENT_LINK_TIMEOUT
    finally:
        fresh.close()
        from django.db.backends.signals import connection_created

        connection_created.disconnect(dispatch_uid="cluster_cron_server_waits")
        with connection.cursor() as cursor:
            cursor.execute(
                "SET idle_in_transaction_session_timeout = 0"
                if connection.vendor == "postgresql"
                else "SET SESSION idle_transaction_timeout = 0"
            )
