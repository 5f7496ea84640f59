"""Health from outside: ``cluster_health``, the JSON view, and what one process's probes
answer (a real process's endpoints and systemd watchdog: tests/cluster/test_probes.py)."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from django_cluster_cron.core.clock import OffsetClock
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from django_cluster_cron.ops import probe
from django_cluster_cron.ops.health import FAIL, OK, WARN, cluster_health
from django_cluster_cron.scheduler import build_scheduler
from django_cluster_cron.scheduler.health import BACKOFF_MAX, Health
from django_cluster_cron.testing import NoWait
from tests.support.querycount import count_queries

pytestmark = pytest.mark.django_db(transaction=True)

HEALTH = reverse("django_cluster_cron:health")


@pytest.fixture
def leader(settings, redis_client):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}"}
    made = []

    def make(**kwargs):
        scheduler = build_scheduler(
            node_id=kwargs.pop("node_id", "node-a"),
            sleeper=NoWait(),
            stop=threading.Event(),
            **kwargs,
        )
        scheduler.step()
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        scheduler.shutdown()


def by_name(report):
    return {check.name: check for check in report.checks}


def make_job(name="job"):
    job = JobDefinition(name=name, cron="0 0 1 1 *", timezone="UTC", task="tests.add", args=[1, 2])
    job.full_clean()
    job.save()
    return job


def add_run(job, status, slot, **fields):
    return JobRun.objects.create(
        job=job,
        scheduled_for=slot,
        task_id=job.task_id_for(slot),
        trigger=RunTrigger.SCHEDULE,
        status=status,
        **fields,
    )


def test_a_cluster_with_a_ticking_leader_is_healthy(leader):
    scheduler = leader()
    assert scheduler.is_leader
    report = cluster_health()
    checks = by_name(report)
    assert report.healthy, report.lines()
    assert [c.name for c in report.checks] == [
        "database",
        "lease_backend",
        "leader",
        "leader_tick",
        "dispatch_lag",
        "waiting_runs",
        "running_runs",
        "clock_skew",
        "pruning",
        "declared_jobs",
        "broker",
    ]
    assert all(c.status == OK for c in report.checks), report.lines()
    assert "node-a holds the lease" in checks["leader"].reason


def test_no_leader_fails_and_the_command_exits_one(settings, redis_client, capsys):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}"}
    report = cluster_health()
    assert not report.healthy
    assert by_name(report)["leader"].status == FAIL
    assert by_name(report)["leader_tick"].status == FAIL
    with pytest.raises(SystemExit) as exited:
        call_command("cluster_health")
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert "fail leader: no scheduler holds the lease" in out
    assert out.strip().endswith("cluster: NOT healthy")


def test_the_command_exits_zero_when_healthy_and_prints_json(leader, capsys):
    leader()
    call_command("cluster_health")  # no SystemExit: exit status 0
    assert "cluster: healthy" in capsys.readouterr().out
    call_command("cluster_health", "--json")
    document = json.loads(capsys.readouterr().out)
    assert document["healthy"] is True
    assert {c["name"] for c in document["checks"]} >= {"leader", "broker"}


def test_strict_says_not_healthy_when_a_warning_makes_it_exit_one(leader, capsys):
    ahead = OffsetClock(
        host=lambda: timezone.now() + timedelta(seconds=30), warn_after=timedelta(seconds=1)
    )
    leader(clock=ahead)  # a skewed clock: a warning, no failure
    call_command("cluster_health", "--no-broker")  # exit 0: warnings do not fail
    out = capsys.readouterr().out
    assert "warn clock_skew:" in out
    assert out.strip().endswith("cluster: healthy, with 1 warning")
    with pytest.raises(SystemExit) as exited:
        call_command("cluster_health", "--no-broker", "--strict")
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert out.strip().endswith("cluster: NOT healthy (--strict: 1 warning)")
    with pytest.raises(SystemExit):
        call_command("cluster_health", "--no-broker", "--strict", "--json")
    document = json.loads(capsys.readouterr().out)
    assert (document["healthy"], document["strict"]) == (False, True)


def test_runs_waiting_long_past_their_slot_warn_then_fail(leader, settings):
    leader()
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "OUTBOX_REPUBLISH_AFTER": 10}
    job = make_job()
    now = timezone.now()
    add_run(job, RunStatus.QUEUED, now - timedelta(seconds=60))
    check = by_name(cluster_health(broker=False))["waiting_runs"]
    assert check.status == WARN, check
    add_run(job, RunStatus.PENDING, now - timedelta(seconds=600))
    check = by_name(cluster_health(broker=False))["waiting_runs"]
    assert check.status == FAIL, check
    assert 590 < (check.value or 0) < 700
    # Runs not due yet (a retry's ETA, a future slot) are not waiting.
    JobRun.objects.all().delete()
    add_run(job, RunStatus.PENDING, now + timedelta(minutes=5))
    assert by_name(cluster_health(broker=False))["waiting_runs"].status == OK


def test_a_running_run_without_heartbeat_warns_then_fails(leader, settings):
    leader()
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "RUN_LOST_AFTER": 10}
    job = make_job()
    now = timezone.now()
    run = add_run(job, RunStatus.RUNNING, now - timedelta(minutes=1), heartbeat_at=now)
    assert by_name(cluster_health(broker=False))["running_runs"].status == OK
    JobRun.objects.filter(pk=run.pk).update(heartbeat_at=now - timedelta(seconds=15))
    assert by_name(cluster_health(broker=False))["running_runs"].status == WARN
    JobRun.objects.filter(pk=run.pk).update(heartbeat_at=now - timedelta(seconds=60))
    assert by_name(cluster_health(broker=False))["running_runs"].status == FAIL


def test_a_skewed_node_is_a_warning_not_a_failure(leader):
    ahead = OffsetClock(
        host=lambda: timezone.now() + timedelta(seconds=30), warn_after=timedelta(seconds=1)
    )
    leader(clock=ahead)
    report = cluster_health(broker=False)
    check = by_name(report)["clock_skew"]
    assert check.status == WARN
    # Measured around a round trip to the database: within half of it of +30 s (a few
    # milliseconds, unless a loaded machine stalls the round trip).
    assert check.value == pytest.approx(30, abs=1)
    shown = re.search(r"node-a \+(\d+\.\d{3}) s", check.reason)
    assert shown, check.reason
    assert float(shown.group(1)) == pytest.approx(30, abs=1), check.reason
    assert report.healthy


def test_an_unreachable_database_is_one_failed_check_not_a_crash(settings, capsys):
    from django.db import connections

    original = dict(connections["default"].settings_dict)
    connections["default"].close()
    connections["default"].settings_dict.update(
        {"NAME": "/nonexistent/dir/db.sqlite3"}
        if connections["default"].vendor == "sqlite"
        else {"HOST": "127.0.0.1", "PORT": "1"}
    )
    try:
        report = cluster_health(broker=False)
    finally:
        connections["default"].close()
        connections["default"].settings_dict.update(original)
    assert [(c.name, c.status) for c in report.checks] == [("database", FAIL)]
    assert "unreachable" in report.checks[0].reason


def test_an_unreachable_broker_fails(leader, settings):
    from tests.testapp.celery import app

    leader()
    make_job()  # a job whose task is a Celery task: its runs need the broker
    original = app.conf.broker_url
    app.conf.update(broker_url="redis://127.0.0.1:1/0")  # nothing listens on port 1
    try:
        check = by_name(cluster_health())["broker"]
    finally:
        app.conf.update(broker_url=original)
    assert check.status == FAIL
    assert "unreachable" in check.reason


# -- a cluster with no broker: django.tasks jobs on the database lease ----------------------------

CLOSED_BROKER = "amqp://guest:guest@127.0.0.1:1//"  # nothing listens on port 1


@pytest.fixture
def database_only(settings, leader):
    """A project of django.tasks jobs on the database lease (no Redis, no broker), whose Celery
    app, if any, points at a broker that is not there; a leader leading it."""
    from tests.testapp.celery import app

    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "database"}
    original = app.conf.broker_url
    app.conf.update(broker_url=CLOSED_BROKER)
    job = JobDefinition(
        name="tasks-only", cron="0 0 1 1 *", task="tests.testapp.dtasks.record", args=["x"]
    )
    job.full_clean()
    job.save()
    leader()
    yield app
    app.conf.update(broker_url=original)


@pytest.fixture
def no_celery_app(settings):
    """No Celery app configured: celery.current_app is Celery's default app (here with its
    broker on a closed port: Celery's default amqp://localhost may have a server on this host)."""
    from celery import Celery, current_app

    previous = current_app._get_current_object()  # type: ignore[attr-defined]
    settings.CLUSTER_CRON = {k: v for k, v in settings.CLUSTER_CRON.items() if k != "CELERY_APP"}
    Celery(set_as_current=True).conf.update(broker_url=CLOSED_BROKER)
    yield
    previous.set_current()


@pytest.mark.parametrize("celery", ["configured", "none"])
def test_a_cluster_of_django_tasks_jobs_is_not_judged_by_a_celery_broker(
    database_only, request, celery, client, capsys
):
    if celery == "none":
        request.getfixturevalue("no_celery_app")
    report = cluster_health()
    check = by_name(report)["broker"]
    assert check.status == OK, report.lines()
    assert "not checked: no job runs on Celery" in check.reason
    assert report.healthy, report.lines()
    call_command("cluster_health")  # no SystemExit: exit status 0
    out = capsys.readouterr().out
    assert "ok   broker: not checked: no job runs on Celery" in out
    assert out.strip().endswith("cluster: healthy")
    response = client.get(HEALTH)
    assert response.status_code == 200, response.json()


def test_one_celery_job_beside_them_makes_the_broker_count(database_only, capsys):
    job = JobDefinition(name="on-celery", cron="0 0 1 1 *", task="tests.add", args=[1, 2])
    job.full_clean()
    job.save()
    job.pause()  # a paused job can still be run now, through the broker
    check = by_name(cluster_health())["broker"]
    assert check.status == FAIL
    assert "unreachable" in check.reason
    with pytest.raises(SystemExit) as exited:
        call_command("cluster_health")
    assert exited.value.code == 1
    job.soft_delete()  # a deleted job sends nothing
    assert by_name(cluster_health())["broker"].status == OK


def test_the_health_view_answers_json_200_or_503(leader, client, settings, redis_client):
    response = client.get(HEALTH + "?broker=0")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response.json()["healthy"] is False
    leader()
    response = client.get(HEALTH)
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == OK
    assert client.post(HEALTH).status_code == 405


@pytest.mark.parametrize("runs", [10, 400])
def test_the_health_checks_cost_the_same_queries_whatever_the_ledger_holds(leader, runs):
    leader()
    job = make_job()
    now = timezone.now()
    JobRun.objects.bulk_create(
        JobRun(
            job=job,
            scheduled_for=now - timedelta(minutes=i + 1),
            task_id=job.task_id_for(now - timedelta(minutes=i + 1)),
            trigger=RunTrigger.SCHEDULE,
            status=RunStatus.SUCCESS if i % 3 else RunStatus.QUEUED,
        )
        for i in range(runs)
    )
    with count_queries() as queries:
        cluster_health(broker=False)
    assert len(queries) == HEALTH_QUERIES, [sql for sql, _ in queries.queries]


# The database's clock (also the database check), the leader row, the oldest pending, the oldest
# queued, the oldest silent running run (the lease backend is Redis here: no SQL for the leader
# and node reports).
HEALTH_QUERIES = 5


# -- one process: what its probes answer ---------------------------------------------------------


def fake_scheduler(last_pass_ago=0.5, down=None):
    health = Health()
    now = time.monotonic()
    health.down_since = {name: now - seconds for name, seconds in (down or {}).items()}
    return SimpleNamespace(
        node_id="n",
        is_leader=True,
        epoch=3,
        backend=SimpleNamespace(name="redis"),
        lease=SimpleNamespace(ttl=10.0),
        longest_sleep=max(1.0, 3.3, 15.0, BACKOFF_MAX),
        last_pass=None if last_pass_ago is None else now - last_pass_ago,
        health=health,
    )


def test_liveness_is_the_loop_turning_and_readiness_adds_the_dependencies():
    assert probe.process_health(fake_scheduler())["alive"] is True
    assert probe.process_health(fake_scheduler())["ready"] is True
    stuck = probe.process_health(fake_scheduler(last_pass_ago=600))
    assert (stuck["alive"], stuck["ready"]) == (False, False)
    assert probe.process_health(fake_scheduler(last_pass_ago=None))["alive"] is False
    # Redis down a little while: still ready (the loop rides short outages out)...
    brief = probe.process_health(fake_scheduler(down={"redis": 5}))
    assert (brief["alive"], brief["ready"]) == (True, True)
    # ...down for longer than the bound: alive (do not restart it) but not ready.
    long = probe.process_health(fake_scheduler(down={"redis": 120}))
    assert (long["alive"], long["ready"]) == (True, False)
    assert long["down_for_seconds"]["redis"] >= 119


# -- who sees what, and what a flood of probes costs --------------------------------------------


def test_an_anonymous_caller_sees_names_and_statuses_only(leader, client):
    leader()
    body = client.get(HEALTH + "?broker=0").json()
    assert body["healthy"] is True
    assert body["checks"]
    for check in body["checks"]:
        assert set(check) == {"name", "status"}
    assert "node-a" not in json.dumps(body)  # the leader's node id is a detail


def test_details_need_the_cluster_status_permission_or_the_token(leader, client, settings):
    from django.contrib.auth.models import Permission, User

    leader()
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "HEALTH_TOKEN": "s3cret-probe-token"}

    def reasons(**headers):
        from django_cluster_cron.ops.views import forget_reports

        forget_reports()
        checks = client.get(HEALTH + "?broker=0", **headers).json()["checks"]
        return next(c.get("reason") for c in checks if c["name"] == "leader")

    assert reasons() is None
    assert reasons(HTTP_AUTHORIZATION="Bearer wrong") is None
    assert "node-a holds the lease" in reasons(HTTP_AUTHORIZATION="Bearer s3cret-probe-token")
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    assert reasons() is None  # staff alone is not enough
    staff.user_permissions.add(Permission.objects.get(codename="view_clusterstatus"))
    client.force_login(User.objects.get(pk=staff.pk))
    assert "node-a holds the lease" in reasons()


def test_a_flood_of_probes_runs_the_checks_once_per_interval(leader, client, settings, monkeypatch):
    from django_cluster_cron.ops import views

    leader()
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "HEALTH_CACHE": 60}
    ran = []
    real = views.cluster_health  # type: ignore[attr-defined]

    def counted(**kwargs):
        ran.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(views, "cluster_health", counted)
    answers = [client.get(HEALTH).status_code for _ in range(20)]
    assert answers == [200] * 20
    assert ran == [{"broker": True}]  # one round of checks, one broker connection
