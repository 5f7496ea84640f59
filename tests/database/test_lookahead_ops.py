"""What operators see of runs recorded ahead of their time: the admin, the cluster page and the
health checks tell them from late or stuck runs (issue 18.1)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from django_cluster_cron.ops.health import check_waiting_runs
from django_cluster_cron.ops.status import cluster_status, stuck_runs

from .test_control_room import CLUSTER, JOBS, RUNS, make_job

pytestmark = pytest.mark.django_db


def recorded_ahead(job: JobDefinition, due_in: float, created_ago: float = 0.0) -> JobRun:
    """A run the leader recorded ahead: pending, due ``due_in`` s from now, its next_run_at the
    instant after it, recorded ``created_ago`` s ago."""
    now = database_now()
    due = (now + timedelta(seconds=due_in)).replace(microsecond=0)
    run: JobRun = JobRun.objects.create(
        job=job,
        scheduled_for=due,
        due_at=due,
        task_id=job.task_id_for(due),
        trigger=RunTrigger.SCHEDULE,
        status=RunStatus.PENDING,
    )
    JobRun.objects.filter(pk=run.pk).update(created_at=now - timedelta(seconds=created_ago))
    JobDefinition.objects.filter(pk=job.pk).update(
        last_scheduled_at=due, next_run_at=due + timedelta(days=1)
    )
    run.refresh_from_db()
    return run


def test_the_ledger_shows_a_run_recorded_ahead_as_such_not_as_waiting(admin_client):
    job = make_job(cron="0 9 * * *", timezone="UTC")
    run = recorded_ahead(job, due_in=40)
    ledger = admin_client.get(RUNS).content.decode()
    assert ">ahead</span>" in ledger
    assert "recorded ahead of its time: its message is sent at" in ledger
    page = admin_client.get(reverse("admin:django_cluster_cron_jobrun_change", args=[run.pk]))
    assert "Due (sent no earlier)" in page.content.decode()
    # Once due and still pending, it is an ordinary pending run again.
    JobRun.objects.filter(pk=run.pk).update(due_at=timezone.now() - timedelta(seconds=1))
    assert ">ahead</span>" not in admin_client.get(RUNS).content.decode()


def test_the_jobs_list_shows_the_run_recorded_ahead_as_the_next_run(admin_client):
    job = make_job(cron="0 9 * * *", timezone="UTC")
    run = recorded_ahead(job, due_in=40)
    page = admin_client.get(JOBS).content.decode()
    assert run.due_at is not None
    shown = f"{run.due_at:%Y-%m-%d %H:%M:%S}"
    tomorrow = f"{run.due_at + timedelta(days=1):%Y-%m-%d %H:%M:%S}"
    assert shown in page
    assert tomorrow not in page  # next_run_at is the instant after the recorded one
    assert ">recorded</small>" in page
    change = reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    assert shown in admin_client.get(change).content.decode()


def test_a_run_recorded_ahead_long_ago_is_neither_stuck_nor_a_waiting_run(admin_client):
    job = make_job(cron="0 9 * * *", timezone="UTC")
    run = recorded_ahead(job, due_in=20, created_ago=600)  # a long look-ahead
    now = database_now()
    assert run not in list(stuck_runs(now))
    assert check_waiting_runs(now).status == "ok"
    status = cluster_status(now)
    assert status.ahead == 1
    assert status.ahead_next == run.due_at
    page = admin_client.get(CLUSTER).content.decode()
    assert 'id="dcc-ahead">1 (the first due at' in page
    # Had it been due 10 minutes ago and still pending, it would be stuck.
    JobRun.objects.filter(pk=run.pk).update(due_at=now - timedelta(minutes=10))
    assert run in list(stuck_runs(now))


def test_the_coming_dispatches_count_a_run_recorded_ahead(admin_client):
    """A daily job whose run at the top of the next minute is recorded: its next_run_at is
    tomorrow, yet the page counts today's dispatch."""
    now = database_now()
    slot = (now + timedelta(seconds=90)).replace(second=0, microsecond=0)  # 30 to 90 s away
    job = make_job(cron=f"{slot.minute} {slot.hour} * * *", timezone="UTC")
    run = recorded_ahead(job, due_in=(slot - now).total_seconds())
    assert run.due_at == slot
    page = admin_client.get(reverse("admin:django_cluster_cron_job_forecast"))
    assert page.context["found"].jobs == 1
    assert page.context["found"].total == 1


def test_the_api_gives_the_run_recorded_ahead_as_the_jobs_next_run(admin_client):
    job = make_job(cron="0 9 * * *", timezone="UTC")
    run = recorded_ahead(job, due_in=40)
    assert run.due_at is not None
    body = admin_client.get(f"/cron/api/jobs/{job.pk}/").json()
    assert body["next_run"].replace("Z", "+00:00") == run.due_at.isoformat()
    assert body["next_run_at"] != body["next_run"]
    listed = admin_client.get("/cron/api/jobs/").json()["results"][0]
    assert listed["next_run"] == body["next_run"]
    runs = admin_client.get("/cron/api/runs/").json()["results"]
    assert runs[0]["due_at"].replace("Z", "+00:00") == run.due_at.isoformat()
