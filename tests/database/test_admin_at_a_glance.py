"""The admin read at a glance: one rule for timestamps, the run's own id in its title, the
pictures (a job's recent runs, the coming dispatches), and the small things a newcomer met."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.core.checks import run_checks
from django.urls import reverse
from django.utils import timezone

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger

from .test_control_room import CLUSTER, JOBS, RUNS, add_runs, make_job

pytestmark = pytest.mark.django_db

# What the admin's timestamps look like: <time ...>[date ]HH:MM:SS ZONE</time>.
TIME = re.compile(r'<time class="dcc-time" datetime="([^"]+)" title="([^"]+)">([^<]*)</time>')
SHOWN = re.compile(r"^(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d [A-Za-z0-9+\-]+$")


def times_on(client, url):
    page = client.get(url)
    assert page.status_code == 200, url
    html = page.content.decode()
    # Django's own date format ("Nov. 25, 2026, 10:35 a.m.") would mean a timestamp escaped
    # the rule: minutes only, the server's zone.
    assert not re.search(r"\d (a|p)\.m\.", html), url
    return [(iso, hover, shown.replace("\xa0", " ")) for iso, hover, shown in TIME.findall(html)]


def test_every_timestamp_on_every_page_is_to_the_second_with_its_zone_and_utc_on_hover(
    admin_client,
):
    job = make_job(timezone="Asia/Kolkata")
    runs = add_runs(job, [RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.QUEUED])
    JobRun.objects.filter(pk=runs[0].pk).update(
        started_at=runs[0].scheduled_for + timedelta(seconds=1, milliseconds=250),
        finished_at=runs[0].scheduled_for + timedelta(seconds=3),
        queued_at=runs[0].scheduled_for,
    )
    run = JobRun.objects.get(pk=runs[0].pk)
    pages = {
        "jobs": JOBS,
        "job": reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk]),
        "ledger": RUNS,
        "run": reverse("admin:django_cluster_cron_jobrun_change", args=[run.pk]),
        "cluster": CLUSTER,
        "history": reverse("admin:django_cluster_cron_jobdefinition_history", args=[job.pk]),
    }
    found = {name: times_on(admin_client, url) for name, url in pages.items()}
    for name in ("jobs", "job", "ledger", "run"):
        assert found[name], f"no timestamp on the {name} page"
    for name, stamps in found.items():
        for iso, hover, shown in stamps:
            assert SHOWN.match(shown), (name, shown)
            assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", hover), (name, hover)
            moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
            assert hover.startswith(f"{moment:%Y-%m-%d %H:%M:%S}")
            if name != "cluster":  # a job's times are in its zone (IST is UTC+05:30)
                assert shown.endswith(" IST"), (name, shown)
                local = moment.astimezone(dt_timezone(timedelta(hours=5, minutes=30)))
                assert f"{local:%H:%M:%S}" in shown
    # The run page: slot, queued, started and finished, each with its seconds.
    india = dt_timezone(timedelta(hours=5, minutes=30))
    slot, started = run.scheduled_for.astimezone(india), run.started_at.astimezone(india)
    shown_on_run = [shown for _, _, shown in found["run"]]
    assert f"{slot:%Y-%m-%d %H:%M:%S} IST" in shown_on_run
    assert f"{started:%Y-%m-%d %H:%M:%S} IST" in shown_on_run
    # The ledger gives a start on its slot's day as a time only.
    if started.date() == slot.date():
        assert f"{started:%H:%M:%S} IST" in [s for _, _, s in found["ledger"]]


def test_a_runs_page_is_titled_by_the_runs_own_id_and_its_job(admin_client):
    job = make_job(name="nightly-report")
    run = add_runs(job, [RunStatus.QUEUED])[0]
    run = JobRun.objects.get(pk=run.pk)
    html = admin_client.get(
        reverse("admin:django_cluster_cron_jobrun_change", args=[run.pk])
    ).content.decode()
    # In the breadcrumbs and the heading (their markup differs between Django versions).
    assert html.count(f"Run {run.pk} of nightly-report, slot") >= 2
    assert f"{job.pk} @ " not in html
    assert str(JobRun.objects.get(pk=run.pk)).startswith(f"Run {run.pk} of job {job.pk}, slot ")


def test_the_ledger_offers_show_all_only_when_something_narrowed_it(admin_client):
    add_runs(make_job(), [RunStatus.SUCCESS, RunStatus.FAILED])
    whole = admin_client.get(RUNS).content.decode()
    assert "Show all" not in whole
    narrowed = admin_client.get(RUNS, {"status__exact": "failed"}).content.decode()
    assert "1 result" in narrowed
    assert "Show all" in narrowed
    searched = admin_client.get(RUNS, {"q": "nothing-like-this"}).content.decode()
    assert "Show all" in searched


def test_run_now_and_resume_are_drawn_like_the_other_object_tools(admin_client):
    job = make_job(enabled=False)
    html = admin_client.get(
        reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    ).content.decode()
    assert re.search(r'<button type="submit" class="dcc-tool dcc-run-now">Run now</button>', html)
    assert re.search(r'<button type="submit" class="dcc-tool dcc-resume">Resume</button>', html)
    assert "django_cluster_cron/admin.css" in html
    assert 'style="border:0' not in html


def test_a_jobs_page_draws_its_recent_runs_each_linking_to_its_run(admin_client):
    job = make_job()
    runs = add_runs(job, [RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.SKIPPED])
    html = admin_client.get(
        reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    ).content.decode()
    drawn = re.search(r'<svg class="dcc-chart dcc-timeline".*?</svg>', html, re.S)
    assert drawn
    chart = drawn.group(0)
    for run in JobRun.objects.filter(pk__in=[r.pk for r in runs]):
        link = reverse("admin:django_cluster_cron_jobrun_change", args=[run.pk])
        assert f'href="{link}"' in chart
    assert chart.count("<rect") == 3
    assert ": failed, 2.0 s" in chart  # hover: slot, status, duration
    empty = make_job()
    page = admin_client.get(
        reverse("admin:django_cluster_cron_jobdefinition_change", args=[empty.pk])
    )
    assert "No runs yet." in page.content.decode()


def test_the_coming_dispatches_page_shows_the_pile_up_before_it_happens(admin_client):
    now = timezone.now()
    target = (now + timedelta(minutes=30)).replace(second=0, microsecond=0)
    at_target = f"{target.minute} {target.hour} * * *"
    for i in range(5):
        make_job(name=f"pile-{i}", cron=at_target, timezone="UTC")
    make_job(name="spread", cron=at_target, timezone="UTC", jitter=600)
    make_job(name="paused", cron=at_target, timezone="UTC", enabled=False)
    make_job(name="every-minute", cron="* * * * *", timezone="UTC")
    page = admin_client.get(reverse("admin:django_cluster_cron_job_forecast"))
    assert page.status_code == 200
    found = page.context["found"]
    assert found.jobs == 7  # the paused job is left out
    assert found.busiest_second == target
    # Five pile-up jobs and the every-minute one (and the jittered one if its offset is 0).
    assert found.busiest_count in (6, 7)
    assert 66 <= found.total <= 67  # 60 or 59 minutes of every-minute, 5 + 1 + 1 jittered
    html = page.content.decode()
    assert "The busiest second is" in html
    assert '<svg class="dcc-chart dcc-forecast"' in html
    assert re.search(r"dispatch\(es\): [^<]+ \(1\) and [34] more job\(s\)", html)  # on hover
    day = admin_client.get(reverse("admin:django_cluster_cron_job_forecast"), {"window": "day"})
    assert day.context["found"].total >= 1440 - 15 + 6  # the window starts on a quarter hour
    assert len(day.context["found"].buckets) == 96
    # Linked from the jobs list.
    assert (
        reverse("admin:django_cluster_cron_job_forecast") in admin_client.get(JOBS).content.decode()
    )


def test_the_coming_dispatches_page_needs_a_permission_on_jobs(client):
    from django.contrib.auth.models import User

    user = User.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(reverse("admin:django_cluster_cron_job_forecast")).status_code == 403


def test_a_lowercase_settings_key_gets_the_key_it_meant(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "redis_alias": "default"}
    found = [m for m in run_checks() if m.id == "cluster_cron.W001"]
    assert found
    assert found[0].hint == "Did you mean 'REDIS_ALIAS'?"


def test_the_jobs_list_puts_the_task_under_the_name_and_the_zone_in_the_next_run(admin_client):
    job = make_job(name="a" * 60, timezone="America/New_York")
    JobRun.objects.create(
        job=job,
        scheduled_for=timezone.now().replace(microsecond=0),
        task_id="x",
        trigger=RunTrigger.SCHEDULE,
        status=RunStatus.SUCCESS,
    )
    html = admin_client.get(JOBS).content.decode()
    assert f'<span class="dcc-name" title="{job.name}">{job.name}</span>' in html
    assert '<small class="dcc-task" title="tests.add">tests.add</small>' in html
    cell = re.search(r'<td class="field-next_run">(.*?)</td>', html, re.S)
    assert cell
    next_run = cell.group(1)
    assert re.search(r"\d\d:\d\d:\d\d\xa0E[SD]T</time>", next_run)
    assert "100% of 1 succeeded" in html  # under the strip
    for gone in ("column-timezone", "column-task", "column-last_status", "column-success"):
        assert gone not in html
    assert JobDefinition.objects.count() == 1


def test_the_cluster_page_says_the_reports_cannot_be_read_while_redis_is_down(
    admin_client, settings, throwaway_redis
):
    """Schedulers may well be running: the page must not tell the operator to start one."""
    url = throwaway_redis.url
    throwaway_redis.stop()
    settings.CACHES = {
        **settings.CACHES,
        "down": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": url,
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
        },
    }
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "REDIS_ALIAS": "down",
        "LEASE_BACKEND": "redis",
    }
    html = admin_client.get(CLUSTER).content.decode()
    assert (
        "could not be read, so the leader, the node reports and the locks below are unknown" in html
    )
    assert "Node reports cannot be read while Redis is unreachable" in html
    assert "No scheduler has reported recently" not in html
