"""The admin as the control room: pages, actions, permissions, query counts, prune_runs."""

from __future__ import annotations

import io
import itertools
import re
import threading
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from django_cluster_cron.core.clock import OffsetClock
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from django_cluster_cron.testing import NoWait
from tests.support.querycount import count_queries

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:django_cluster_cron_jobdefinition_changelist")
RUNS = reverse("admin:django_cluster_cron_jobrun_changelist")
CLUSTER = reverse("admin:django_cluster_cron_clusterstatus_changelist")


_job_numbers = itertools.count(1)


def make_job(name=None, **fields):
    values = {
        "cron": "*/5 * * * *",
        "timezone": "Europe/Berlin",
        "task": "tests.add",
        "args": [1, 2],
    }
    values.update(fields)
    job = JobDefinition(name=name or f"job-{next(_job_numbers)}", **values)
    job.full_clean()
    job.save()
    return job


def add_runs(job, statuses, start=None):
    start = start or timezone.now() - timedelta(days=1)
    runs = []
    for i, status in enumerate(statuses):
        slot = start + timedelta(minutes=5 * i)
        runs.append(
            JobRun(
                job=job,
                scheduled_for=slot,
                task_id=job.task_id_for(slot),
                trigger=RunTrigger.SCHEDULE,
                status=status,
                duration=timedelta(seconds=i + 1),
            )
        )
    JobRun.objects.bulk_create(runs)
    return runs


@pytest.fixture
def operator(client):
    """A staff user who may view jobs and runs, and nothing more (until a test grants it)."""
    user = User.objects.create_user("op", password="pw", is_staff=True)
    for codename in ("view_jobdefinition", "view_jobrun"):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client.force_login(user)

    def grant(*codenames):
        for codename in codenames:
            user.user_permissions.add(Permission.objects.get(codename=codename))
        # permissions are cached on the user object
        client.force_login(User.objects.get(pk=user.pk))

    client.grant = grant
    return client


# -- jobs list --------------------------------------------------------------------------------


def test_the_jobs_list_shows_schedule_in_words_state_next_run_strip_and_success_rate(admin_client):
    job = make_job("nightly", cron="30 2 * * *")
    add_runs(job, [RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.SUCCESS, RunStatus.SUCCESS])
    make_job("paused-one").pause("waiting for the vendor")
    html = admin_client.get(JOBS).content.decode()
    assert "At 02:30" in html
    assert '<code class="dcc-cron">30 2 * * *</code>' in html
    assert 'class="dcc-strip"' in html
    assert html.count("<rect") == 4
    assert "75% of 4" in html
    assert "CET" in html or "CEST" in html  # next run in the job's zone
    assert "waiting for the vendor" in html


def test_the_jobs_list_costs_the_same_queries_for_10_and_100_jobs(admin_client):
    counts = []
    for total in (10, 100):
        while JobDefinition.objects.count() < total:
            add_runs(make_job(), [RunStatus.SUCCESS] * 3)
        with count_queries() as queries:
            response = admin_client.get(JOBS + "?all=")
        assert response.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts
    assert counts[0] > 0


@pytest.mark.parametrize("status", [RunStatus.FAILED, RunStatus.SUCCESS])
def test_the_last_status_filter_selects_jobs_by_their_latest_run(admin_client, status):
    good, bad = make_job("good"), make_job("bad")
    add_runs(good, [RunStatus.FAILED, RunStatus.SUCCESS])
    add_runs(bad, [RunStatus.SUCCESS, RunStatus.FAILED])
    html = admin_client.get(JOBS + f"?last_status={status}").content.decode()
    shown = "good" if status == RunStatus.SUCCESS else "bad"
    hidden = "bad" if shown == "good" else "good"
    assert f'title="{shown}">{shown}</span>' in html
    assert f'title="{hidden}">{hidden}</span>' not in html


# -- permissions --------------------------------------------------------------------------------


def test_an_operator_without_permissions_sees_no_action_and_cannot_post_one(operator):
    job = make_job()
    change = reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    html = operator.get(change).content.decode()
    for button in ("dcc-run-now", "dcc-pause", "dcc-backfill"):
        assert button not in html
    listing = operator.get(JOBS).content.decode()
    for action in ("pause_jobs", "run_jobs_now", "soft_delete_jobs", "delete_selected"):
        assert action not in listing
    for name in ("run", "pause", "backfill"):
        url = reverse(f"admin:django_cluster_cron_job_{name}", args=[job.pk])
        assert operator.post(url).status_code == 403
    assert not JobRun.objects.exists()


@pytest.mark.parametrize(
    ("codename", "button", "action"),
    [
        ("run_jobdefinition", "dcc-run-now", "run_jobs_now"),
        ("pause_jobdefinition", "dcc-pause", "pause_jobs"),
        ("backfill_jobdefinition", "dcc-backfill", None),
        ("softdelete_jobdefinition", None, "soft_delete_jobs"),
    ],
)
def test_each_permission_unlocks_its_own_action_only(operator, codename, button, action):
    operator.grant(codename)
    job = make_job()
    change = reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    html = operator.get(change).content.decode()
    listing = operator.get(JOBS).content.decode()
    all_buttons = {"dcc-run-now", "dcc-pause", "dcc-backfill"}
    all_actions = {"run_jobs_now", "pause_jobs", "soft_delete_jobs"}
    for other in all_buttons - {button}:
        assert other not in html
    for other in all_actions - {action}:
        assert other not in listing
    if button:
        assert button in html
    if action:
        assert action in listing


# -- actions ------------------------------------------------------------------------------------


def test_pause_with_a_note_then_resume_are_recorded_in_the_admin_log(admin_client):
    job = make_job()
    url = reverse("admin:django_cluster_cron_job_pause", args=[job.pk])
    assert admin_client.get(url).status_code == 200
    admin_client.post(url, {"note": "maintenance window"})
    job.refresh_from_db()
    assert not job.enabled
    assert job.pause_note == "maintenance window"
    assert job.next_run_at is None
    assert "maintenance window" in admin_client.get(JOBS).content.decode()
    admin_client.post(reverse("admin:django_cluster_cron_job_resume", args=[job.pk]))
    job = JobDefinition.objects.get(pk=job.pk)
    assert job.enabled
    assert job.pause_note == ""
    assert job.next_run_at is not None
    messages = list(
        LogEntry.objects.filter(object_id=str(job.pk)).values_list("change_message", flat=True)
    )
    assert any("maintenance window" in m for m in messages)
    assert any("Resumed" in m for m in messages)


def test_run_now_records_a_manual_run_publishes_it_and_leaves_the_schedule(
    admin_client, redis_client
):
    job = make_job()
    before = (job.next_run_at, job.last_scheduled_at)
    response = admin_client.post(reverse("admin:django_cluster_cron_job_run", args=[job.pk]))
    run = JobRun.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:django_cluster_cron_jobrun_change", args=[run.pk])
    assert run.trigger == RunTrigger.MANUAL
    assert run.status == RunStatus.QUEUED
    assert run.dispatched_by == "admin:admin"
    assert redis_client.llen("celery") == 1
    job.refresh_from_db()
    assert (job.next_run_at, job.last_scheduled_at) == before
    assert LogEntry.objects.filter(
        object_id=str(job.pk), change_message__contains="Run now"
    ).exists()


def test_run_now_goes_through_the_overlap_policy(admin_client):
    job = make_job(overlap_policy="skip")
    add_runs(job, [RunStatus.RUNNING], start=timezone.now() - timedelta(minutes=1))
    admin_client.post(reverse("admin:django_cluster_cron_job_run", args=[job.pk]))
    manual = JobRun.objects.get(trigger=RunTrigger.MANUAL)
    assert manual.status == RunStatus.SKIPPED


def test_backfill_previews_the_slot_count_then_creates_the_runs(admin_client):
    job = make_job(cron="0 * * * *", timezone="UTC")
    url = reverse("admin:django_cluster_cron_job_backfill", args=[job.pk])
    end = (timezone.now() - timedelta(hours=1)).replace(minute=30, second=0, microsecond=0)
    start = end - timedelta(hours=6)
    form = {"start": start.strftime("%Y-%m-%d %H:%M:%S"), "end": end.strftime("%Y-%m-%d %H:%M:%S")}
    preview = admin_client.post(url, {**form, "preview": "1"}).content.decode()
    assert "creates <strong>6</strong> backfill run(s)" in preview
    assert not JobRun.objects.exists()
    admin_client.post(url, {**form, "confirm": "1"})
    assert JobRun.objects.filter(trigger=RunTrigger.BACKFILL).count() == 6
    again = admin_client.post(url, {**form, "preview": "1"}).content.decode()
    assert "creates <strong>0</strong>" in again
    assert "6 slot(s) in the range already have a run" in again


def test_backfill_refuses_the_future_and_huge_ranges(admin_client):
    job = make_job(cron="* * * * * *", timezone="UTC")
    url = reverse("admin:django_cluster_cron_job_backfill", args=[job.pk])
    now = timezone.now()
    future = {
        "start": now.strftime("%Y-%m-%d %H:%M:%S"),
        "end": (now + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S"),
        "preview": "1",
    }
    assert "the end is in the future" in admin_client.post(url, future).content.decode()
    huge = {
        "start": (now - timedelta(days=2)).strftime("%Y-%m-%d %H:%M:%S"),
        "end": (now - timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S"),
        "confirm": "1",
    }
    assert "narrow" in admin_client.post(url, huge).content.decode()
    assert not JobRun.objects.exists()


def test_soft_delete_and_restore_actions(admin_client):
    job = make_job()
    admin_client.post(JOBS, {"action": "soft_delete_jobs", "_selected_action": [job.pk]})
    job = JobDefinition.all_objects.get(pk=job.pk)
    assert job.deleted_at is not None
    assert "deleted" in admin_client.get(JOBS + "?deleted=yes").content.decode()
    admin_client.post(JOBS, {"action": "restore_jobs", "_selected_action": [job.pk]})
    assert JobDefinition.objects.filter(pk=job.pk).exists()


def test_retry_a_failed_run_and_cancel_a_queued_one(operator, redis_client):
    operator.grant("retry_jobrun", "cancel_jobrun")
    job = make_job()
    failed, queued = add_runs(job, [RunStatus.FAILED, RunStatus.QUEUED])
    operator.post(RUNS, {"action": "retry_runs", "_selected_action": [failed.pk]})
    failed.refresh_from_db()
    assert failed.status == RunStatus.QUEUED
    assert failed.attempt == 2
    operator.post(RUNS, {"action": "cancel_runs", "_selected_action": [queued.pk]})
    queued.refresh_from_db()
    assert queued.status == RunStatus.CANCELLED
    assert "op" in queued.reason
    response = operator.post(
        RUNS, {"action": "cancel_runs", "_selected_action": [queued.pk]}, follow=True
    )
    assert "only a waiting or running run can be cancelled" in response.content.decode()


def test_the_cancel_button_asks_a_running_run_to_stop_and_says_what_follows(operator):
    job = make_job(cancel_grace=30)
    (run,) = add_runs(job, [RunStatus.RUNNING])
    JobRun.objects.filter(pk=run.pk).update(worker_pool="threads")
    page = reverse("admin:django_cluster_cron_jobrun_change", args=[run.pk])
    button = reverse("admin:django_cluster_cron_run_cancel", args=[run.pk])
    assert button not in operator.get(page).content.decode()  # no permission: no button
    assert operator.post(button).status_code == 403
    operator.grant("cancel_jobrun")
    assert "Cancel (ask it to stop)" in operator.get(page).content.decode()
    assert operator.get(button).status_code == 405
    shown = operator.post(button, follow=True).content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert run.cancel_requested_by == "op"
    assert f"Run {run.pk} was asked to stop" in shown
    assert "threads pool cannot terminate" in shown
    assert "Cancel (ask it to stop)" not in shown  # asked once
    assert "cancel asked at" in shown.lower()
    again = operator.post(button, follow=True).content.decode()
    assert "already asked to stop, by op" in again
    assert LogEntry.objects.filter(object_id=str(run.pk)).count() == 1


def test_run_actions_need_their_permissions(operator):
    job = make_job()
    (failed,) = add_runs(job, [RunStatus.FAILED])
    listing = operator.get(RUNS).content.decode()
    assert "retry_runs" not in listing
    assert "cancel_runs" not in listing
    operator.post(RUNS, {"action": "retry_runs", "_selected_action": [failed.pk]})
    failed.refresh_from_db()
    assert failed.status == RunStatus.FAILED


# -- runs list and detail -----------------------------------------------------------------------


def test_the_runs_list_costs_the_same_queries_for_20_and_400_runs(admin_client):
    counts = []
    for total in (20, 400):
        job = make_job()
        add_runs(job, [RunStatus.SUCCESS] * total)
        with count_queries() as queries:
            assert admin_client.get(RUNS).status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts
    assert counts[0] > 0


def test_the_run_detail_page_shows_error_and_traceback(admin_client):
    job = make_job()
    (run,) = add_runs(job, [RunStatus.FAILED])
    JobRun.objects.filter(pk=run.pk).update(
        error="RuntimeError: boom", traceback="Traceback (most recent call last):\n  boom"
    )
    html = admin_client.get(
        reverse("admin:django_cluster_cron_jobrun_change", args=[run.pk])
    ).content.decode()
    assert "RuntimeError: boom" in html
    assert "Traceback (most recent call last)" in html
    assert "<pre" in html


def test_the_runs_list_counts_at_most_the_cap(admin_client, monkeypatch):
    from django_cluster_cron.admin import runs as runs_admin

    monkeypatch.setattr(runs_admin, "COUNT_CAP", 5)
    add_runs(make_job(), [RunStatus.SUCCESS] * 12)
    html = admin_client.get(RUNS).content.decode()
    assert re.search(r"\b6 runs\b", html), "the count stops at the cap + 1"


# -- cluster page -------------------------------------------------------------------------------


def use_lease(settings, kind: str) -> None:
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}",
        "LEASE_BACKEND": kind,
    }


# The database lease writes its rows on a connection of its own: those tests must commit.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("lease", ["redis", "database"])
def test_the_cluster_page_shows_the_leader_nodes_runs_and_locks(
    admin_client, settings, redis_client, lease
):
    from django_cluster_cron.locks import ClusterLock
    from django_cluster_cron.scheduler import build_scheduler

    use_lease(settings, lease)

    # Its host clock runs 30 s ahead of the database's: the page shows the offset it measured.
    ahead = OffsetClock(
        host=lambda: timezone.now() + timedelta(seconds=30), warn_after=timedelta(seconds=1)
    )
    scheduler = build_scheduler(
        node_id="node-alpha", sleeper=NoWait(), stop=threading.Event(), clock=ahead
    )
    lock = ClusterLock("nightly-report", ttl=30)
    try:
        scheduler.step()
        assert lock.acquire()
        add_runs(
            make_job(),
            [RunStatus.SUCCESS, RunStatus.FAILED],
            start=timezone.now() - timedelta(minutes=20),
        )
        html = admin_client.get(CLUSTER).content.decode()
    finally:
        lock.release()
        scheduler.shutdown()
    assert re.search(r'id="dcc-leader">node-alpha<', html)
    assert "node-alpha" in html
    assert "leader" in html
    assert "nightly-report" in html
    assert "Force release" in html
    assert "success" in html
    assert "failed" in html
    offset = re.search(r'class="dcc-clock dcc-skewed">(\d+\.\d+) s \(skewed', html)
    assert offset, html
    assert abs(float(offset.group(1)) - 30) < 1  # half a round trip, stalled or not


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("lease", ["redis", "database"])
def test_force_release_is_for_superusers_only(admin_client, operator, settings, lease):
    from django_cluster_cron.locks import ClusterLock

    use_lease(settings, lease)
    lock = ClusterLock("stuck-import", ttl=30)
    assert lock.acquire()
    try:
        assert "Force release" not in operator.get(CLUSTER).content.decode()
        assert operator.post(CLUSTER, {"lock": "stuck-import"}).status_code == 403
        assert not ClusterLock("stuck-import", ttl=30).acquire()
        admin_client.post(CLUSTER, {"lock": "stuck-import"})
        other = ClusterLock("stuck-import", ttl=30)
        assert other.acquire()
        other.release()
    finally:
        lock.release()


def test_the_admin_index_links_the_cluster_page(admin_client):
    assert CLUSTER in admin_client.get(reverse("admin:index")).content.decode()


# -- prune_runs ---------------------------------------------------------------------------------


def test_prune_runs_deletes_old_finished_runs_and_keeps_active_ones():
    job = make_job()
    old = timezone.now() - timedelta(days=40)
    add_runs(job, [RunStatus.SUCCESS] * 7 + [RunStatus.QUEUED], start=old)
    add_runs(job, [RunStatus.SUCCESS] * 2, start=timezone.now() - timedelta(days=1))
    out = io.StringIO()
    # keep_last 0: the newest runs of the job are not kept beyond the period.
    call_command("prune_runs", "--dry-run", "--keep-last", "0", stdout=out)
    assert "7 runs would be deleted: 7 success." in out.getvalue()
    out = io.StringIO()
    call_command("prune_runs", "--batch-size", "3", "--keep-last", "0", stdout=out)
    assert "Deleted 7 runs" in out.getvalue()
    assert "100%" in out.getvalue()
    assert JobRun.objects.count() == 3
    assert JobRun.objects.filter(status=RunStatus.QUEUED).exists()


def test_the_date_drill_down_lists_the_periods_between_the_first_and_last_run(admin_client):
    job = make_job()
    # Fixed days of one year at midday: across a new year the drill-down lists years, not
    # months, and a day's three runs five minutes apart must not straddle midnight.
    add_runs(job, [RunStatus.SUCCESS] * 3, start=datetime(2025, 3, 1, 12, tzinfo=dt_timezone.utc))
    add_runs(job, [RunStatus.SUCCESS] * 3, start=datetime(2025, 5, 10, 12, tzinfo=dt_timezone.utc))
    html = admin_client.get(RUNS).content.decode()
    months = re.findall(r"scheduled_for__month=(\d+)", html)
    assert set(months) == {"3", "4", "5"}  # every month from the first to the last, no DISTINCT
    first = timezone.localtime(JobRun.objects.earliest().scheduled_for)
    day_page = admin_client.get(
        RUNS + f"?scheduled_for__year={first.year}&scheduled_for__month={first.month}"
        f"&scheduled_for__day={first.day}"
    ).content.decode()
    assert "3 runs" in day_page


def test_bulk_pause_and_resume_actions_change_only_the_selected_jobs(admin_client):
    first, second, other = make_job(), make_job(), make_job()
    admin_client.post(JOBS, {"action": "pause_jobs", "_selected_action": [first.pk, second.pk]})
    states = dict(JobDefinition.objects.values_list("pk", "enabled"))
    assert states == {first.pk: False, second.pk: False, other.pk: True}
    admin_client.post(JOBS, {"action": "resume_jobs", "_selected_action": [first.pk]})
    states = dict(JobDefinition.objects.values_list("pk", "enabled"))
    assert states == {first.pk: True, second.pk: False, other.pk: True}
    assert LogEntry.objects.filter(object_id=str(second.pk), change_message="Paused.").exists()


# -- the form's live preview ------------------------------------------------------------------

PREVIEW = reverse("admin:django_cluster_cron_job_preview")


def test_the_add_form_carries_the_live_preview_box_and_its_script(admin_client):
    page = admin_client.get(reverse("admin:django_cluster_cron_jobdefinition_add")).content.decode()
    assert f'data-preview-url="{PREVIEW}"' in page
    assert "django_cluster_cron/preview.js" in page
    assert "Type a schedule to see its next runs." in page


def test_the_preview_shows_the_next_ten_runs_of_an_unsaved_schedule(admin_client):
    page = admin_client.get(PREVIEW, {"cron": "30 2 * * *", "timezone": "America/New_York"})
    html = page.content.decode()
    assert page.status_code == 200
    assert html.count("<tr><td>") == 10
    assert "America/New_York" in html
    assert "At 02:30" in html
    assert not JobDefinition.objects.exists()


def test_the_preview_warns_of_seconds_written_first_above_its_runs(admin_client):
    html = admin_client.get(PREVIEW, {"cron": "*/15 * * * * *", "timezone": "UTC"}).content
    text = html.decode()
    assert "Quartz and Spring put the seconds first" in text
    assert "write &#x27;* * * * * */15&#x27;" in text
    assert text.count("<tr><td>") == 10


def test_the_preview_explains_a_bad_expression_or_zone_escaped(admin_client):
    bad = admin_client.get(PREVIEW, {"cron": "61 * * * *", "timezone": "UTC"}).content.decode()
    assert "No preview: minute field: &#x27;61&#x27; — 61 is out of range 0-59" in bad
    zone = admin_client.get(PREVIEW, {"cron": "* * * * *", "timezone": "<b>Mars</b>"})
    assert "No preview:" in zone.content.decode()
    assert "<b>" not in zone.content.decode()


def test_the_preview_needs_a_permission_on_jobs(client):
    user = User.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(PREVIEW, {"cron": "* * * * *", "timezone": "UTC"}).status_code == 403


def test_the_cluster_page_needs_its_permission_and_no_lease_row_is_shown(operator, admin_client):
    from django_cluster_cron.models import SchedulerLease

    assert operator.get(CLUSTER).status_code == 403  # staff who may view jobs and runs: no
    assert CLUSTER not in operator.get(reverse("admin:index")).content.decode()
    operator.grant("view_clusterstatus")
    assert operator.get(CLUSTER).status_code == 200
    row = SchedulerLease.objects.create(name="leader", token="node-a:secret-token", epoch=3)
    for client in (operator, admin_client):
        page = client.get(reverse("admin:django_cluster_cron_clusterstatus_change", args=[row.pk]))
        assert page.status_code == 403
        assert "secret-token" not in page.content.decode()


def test_the_strips_runs_are_each_jobs_newest_as_django_reads_them():
    """Each job's newest runs for its strip, read in one statement (on MySQL/MariaDB through an
    index named by hand), equal what the ORM reads for each job: durations and moments included."""
    from django_cluster_cron.admin.display import RECENT_RUNS, recent_runs_by_job

    jobs = [make_job() for _ in range(3)]
    for number, job in enumerate(jobs):
        runs = add_runs(job, [RunStatus.SUCCESS, RunStatus.FAILED] * (RECENT_RUNS // 2 + 3))
        for i, run in enumerate(runs):
            run.duration = timedelta(seconds=i, microseconds=number * 1000 + 7)
        JobRun.objects.bulk_update(runs, ["duration"])
    found = recent_runs_by_job([job.pk for job in jobs])
    for job in jobs:
        expected = list(
            JobRun.objects.filter(job=job)
            .order_by("-scheduled_for")
            .values("job_id", "status", "duration", "scheduled_for")[:RECENT_RUNS]
        )
        assert found[job.pk] == expected
        assert all(row["scheduled_for"].utcoffset() == timedelta(0) for row in found[job.pk])
