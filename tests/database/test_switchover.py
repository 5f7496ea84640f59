"""Through the database's own failover (issue 45): a server that answers but refuses writes is a
dead connection, and a claim or a record whose answer was lost is recognised, not lost.

In process, against the real database: a connection made read-only as a demoted primary's
sessions are (``default_transaction_read_only``, or ``--read-only`` on MySQL/MariaDB's side of
the classification), and a write that commits while its answer is lost (the statement runs, then
the connection reports an error, as when a switchover resets it). With real servers and
processes: tests/cluster/test_failover_processes.py.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import DatabaseError, OperationalError, connection

from django_cluster_cron.dbconn import ReadOnlyServer, check_writable, read_only_error
from django_cluster_cron.dbtime import database_now
from django_cluster_cron.ledger import statements
from django_cluster_cron.models import JobRun, RunStatus
from django_cluster_cron.worker import claim as claim_module
from tests.support.inprocess import Clock, job
from tests.support.jobs import FORM, apply, make_job, make_run
from tests.support.leases import LEASES
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def needs_a_server() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server that could refuse writes")


def read_only_session() -> None:
    """This thread's ORM connection turned read-only, as a demoted primary's sessions are."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET SESSION default_transaction_read_only = on")
        else:
            cursor.execute("SET SESSION TRANSACTION READ ONLY")


def test_a_write_refused_by_a_read_only_server_is_told_apart_from_a_bad_statement():
    needs_a_server()
    read_only_session()
    try:
        with pytest.raises(DatabaseError) as refused:
            make_job()
        assert read_only_error(refused.value)
    finally:
        connection.close()
    with pytest.raises(DatabaseError) as wrong, connection.cursor() as cursor:
        cursor.execute("SELECT no_such_column FROM django_cluster_cron_jobrun")
    assert not read_only_error(wrong.value)


def test_check_writable_says_when_the_server_refuses_writes():
    needs_a_server()
    check_writable(connection)
    if connection.vendor != "postgresql":
        pytest.skip("MySQL/MariaDB: the server's read_only is global (a throwaway server's test)")
    read_only_session()
    try:
        with pytest.raises(ReadOnlyServer):
            check_writable(connection)
    finally:
        connection.close()


class LoseAnswers:
    """Make ``statements.<name>`` commit its write, then raise as a connection reset would:
    the first ``times`` calls."""

    def __init__(self, monkeypatch, name: str, times: int = 1) -> None:
        self.real = getattr(statements, name)
        self.left = times
        self.lock = threading.Lock()
        monkeypatch.setattr(statements, name, self)
        # The modules that call it imported the function by name.
        callers = ("django_cluster_cron.worker.claim", "django_cluster_cron.ledger.transitions")
        for module in callers:
            target = __import__(module, fromlist=["x"])
            if hasattr(target, name):
                monkeypatch.setattr(target, name, self)

    def __call__(self, *args, **kwargs):
        result = self.real(*args, **kwargs)
        with self.lock:
            lose = self.left > 0
            self.left -= lose
        if lose:
            raise OperationalError("server closed the connection unexpectedly (test)")
        return result


@pytest.fixture(params=["task", "execute_run"])
def message_form(request):
    FORM["current"] = request.param
    yield request.param
    FORM["current"] = "task"


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(claim_module, "RETRY_FIRST", 0.01)


@pytest.mark.usefixtures("message_form", "quick_retries")
def test_a_claim_whose_answer_was_lost_is_found_again_and_the_body_runs_once(monkeypatch):
    """Without the claim's token the retry found the run 'running' and took itself for a second
    copy: nothing ran, and the run waited to be declared lost."""
    label = f"lost-claim-{uuid.uuid4().hex[:6]}"
    run = make_run(make_job(args=[label, 0]))
    LoseAnswers(monkeypatch, "claim_run")
    run = apply(run)
    assert run.status == RunStatus.SUCCESS, (run.status, run.error)
    assert Execution.objects.filter(label=label).count() == 1
    assert run.claim_token


@pytest.mark.usefixtures("message_form", "quick_retries")
def test_a_record_whose_answer_was_lost_counts_as_written_and_the_retry_is_sent(
    monkeypatch, redis_client, caplog
):
    """The failure was recorded (retrying, attempt 2) but its answer lost: the record's retry
    finds its own write and goes on to send the next attempt, instead of taking the run for
    one declared lost meanwhile and sending nothing."""
    label = f"lost-record-{uuid.uuid4().hex[:6]}"
    run = make_run(make_job(task="tests.flaky", args=[label, 1], max_retries=1, retry_backoff=0))
    LoseAnswers(monkeypatch, "finish_run")
    redis_client.delete("celery")
    run = apply(run)
    assert (run.status, run.attempt) == (RunStatus.RETRYING, 2)
    assert "finished_late" not in caplog.text
    assert redis_client.llen("celery") == 1  # the next attempt's message, sent at once


@pytest.mark.usefixtures("quick_retries")
def test_a_record_never_takes_another_writers_outcome_for_its_own():
    """A run the leader declared lost and retried meanwhile is not this delivery's any more,
    even if its new state looks like the one this record meant to write."""
    run = make_run(make_job(), status=RunStatus.RUNNING)
    JobRun.objects.filter(pk=run.pk).update(claim_token="mine")
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.RETRYING, attempt=2, claim_token="")
    meant = {"status": RunStatus.RETRYING, "attempt": 2}
    assert statements.finish_run(run.pk, 1, meant, token="mine") == 0


# -- the scheduler ---------------------------------------------------------------------------


@pytest.mark.parametrize("lease_kind", LEASES)
def test_a_leader_whose_connection_reaches_a_read_only_server_steps_down_and_reconnects(
    make_scheduler, caplog
):
    """A demoted primary answers the leader's idle query from what it held: the query also
    asks whether the server takes writes, and the leader steps down at once, closes its
    connections and leads again through a new one."""
    needs_a_server()
    if connection.vendor != "postgresql":
        pytest.skip("MySQL/MariaDB: the server's read_only is global (a throwaway server's test)")
    job("tick")
    clock = Clock(database_now())
    scheduler = make_scheduler("node-a", clock)
    scheduler.step()
    assert scheduler.is_leader
    first = scheduler.epoch
    read_only_session()
    scheduler.step()
    assert not scheduler.is_leader
    assert "reason=database read-only" in caplog.text
    check_writable(connection)  # the read-only session was closed; this one is new
    scheduler.step()
    scheduler.step()
    assert scheduler.is_leader
    assert (scheduler.epoch or 0) > (first or 0)


# -- the change channel ------------------------------------------------------------------------


def needs_postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("only PostgreSQL has a change channel (LISTEN/NOTIFY)")


def woken(listener, timeout: float = 20) -> bool:
    """Whether a change published now and again wakes ``listener`` within ``timeout``."""
    from django_cluster_cron.coordination.changes import DatabaseChanges

    stop = threading.Event()

    def publish_until_stopped() -> None:
        while not stop.wait(0.2):
            DatabaseChanges().publish("test")

    publisher = threading.Thread(target=publish_until_stopped, daemon=True)
    publisher.start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if listener.wait(0.5, threading.Event()):
                return True
        return False
    finally:
        stop.set()
        publisher.join(5)


def test_the_change_channel_listens_again_after_its_connection_is_killed():
    needs_postgres()
    from django_cluster_cron.coordination.changes import CHANNEL, PostgresListener

    listener = PostgresListener("default", poll_interval=0.2)
    try:
        assert woken(listener)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
                [f"LISTEN {CHANNEL}"],
            )
            assert cursor.fetchone() is not None
        assert woken(listener)
    finally:
        listener.close()


def test_the_change_channel_never_listens_on_a_server_that_refuses_writes():
    """Changes are announced where writes go: a listener on a demoted primary would wait for
    nothing. It polls instead, and listens once a connection reaches a writable server."""
    needs_postgres()
    from django_cluster_cron.coordination.changes import PostgresListener

    name = connection.settings_dict["NAME"]
    listener = PostgresListener("default", poll_interval=0.2)
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    try:
        assert not listener.wait(0.5, threading.Event())
        assert listener._wrapper is None  # it did not listen there
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
    try:
        assert woken(listener)
    finally:
        listener.close()


def test_a_redis_lease_key_lost_under_its_leader_is_logged_and_counted_with_why(
    make_scheduler, redis_client, caplog
):
    """A Redis replica promoted without the key (Jepsen: acknowledged writes lost): the leader's
    next renewal finds it gone, steps down saying so, and the loss is counted by reason; nothing
    crashes, and the next pass leads again."""
    from prometheus_client import REGISTRY

    from django_cluster_cron.conf import app_settings

    def lost(reason: str) -> float:
        return REGISTRY.get_sample_value("cluster_cron_lease_lost_total", {"reason": reason}) or 0

    before = lost("gone")
    scheduler = make_scheduler("node-a", Clock(database_now()))
    scheduler.step()
    assert scheduler.is_leader
    redis_client.delete(f"{app_settings.KEY_PREFIX}:leader")
    scheduler.term.renew_at = 0.0
    scheduler.step()
    assert not scheduler.is_leader
    assert "lease.lost node=node-a" in caplog.text
    assert "reason=gone: it expired, or it was lost" in caplog.text
    assert lost("gone") - before == 1
    scheduler.step()
    assert scheduler.is_leader
