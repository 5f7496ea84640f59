"""Intervals, one-offs and exclusions through the model, the scheduler, backfill, the admin's
preview and the API's, against the real database and broker (the scheduler in-process on a
controllable clock; the end-to-end runs with real processes are in tests/cluster)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone as dj_timezone
from rest_framework.test import APIClient

from django_cluster_cron.actions import plan_backfill
from django_cluster_cron.models import JobDefinition, JobRun
from tests.database.test_admin import field_errors, post
from tests.support.inprocess import T0, Clock, job

pytestmark = pytest.mark.django_db(transaction=True)
UTC = timezone.utc


def test_an_interval_job_runs_every_90_seconds_from_the_epoch(make_scheduler):
    # 2030-01-01T12:00:00Z is 21,038,880 intervals of 90 s after the epoch: a slot.
    clock = Clock(T0 + timedelta(seconds=1))
    interval = job("every-90s", cron="@every 90s", watermark=T0 - timedelta(seconds=30))
    scheduler = make_scheduler("node-a", clock)
    scheduler.step()
    clock.advance(90)
    scheduler.step()
    clock.advance(60)  # T0 + 151 s: the next slot, T0 + 180 s, is not due
    scheduler.step()
    assert list(JobRun.objects.values_list("scheduled_for", flat=True).order_by("pk")) == [
        T0,
        T0 + timedelta(seconds=90),
    ]
    interval.refresh_from_db()
    assert interval.next_run_at == T0 + timedelta(seconds=180)


def test_an_interval_counts_from_the_jobs_start(make_scheduler):
    start = T0 + timedelta(seconds=7)
    clock = Clock(T0 + timedelta(seconds=8))
    job("from-start", cron="@every 7m", watermark=T0 - timedelta(seconds=30), start_at=start)
    scheduler = make_scheduler("node-a", clock)
    scheduler.step()
    clock.advance(7 * 60)
    scheduler.step()
    assert list(JobRun.objects.values_list("scheduled_for", flat=True).order_by("pk")) == [
        start,
        start + timedelta(minutes=7),
    ]


def test_a_one_off_runs_once_then_the_job_reads_as_finished(make_scheduler):
    clock = Clock(T0 + timedelta(seconds=1))
    once = job(
        "once",
        cron="@at 2030-01-01T13:00",
        timezone="Europe/Berlin",
        watermark=T0 - timedelta(seconds=30),
    )
    assert once.finished_reason(clock.now) == ""
    scheduler = make_scheduler("node-a", clock)
    scheduler.step()
    clock.advance(3600)
    scheduler.step()
    [run] = JobRun.objects.all()
    assert run.scheduled_for == T0  # 13:00 in Berlin in winter is 12:00Z
    once.refresh_from_db()
    assert once.next_run_at is None
    assert once.finished_reason(clock.now).startswith("finished: its one run was due at")
    assert JobDefinition.objects.filter(pk=once.pk).exists()  # kept, not deleted


def test_excluded_dates_are_not_slots_for_the_scheduler_or_a_backfill(make_scheduler):
    clock = Clock(T0 + timedelta(seconds=1))
    daily = job(
        "weekday-noon",
        cron="0 12 * * *",
        watermark=T0 - timedelta(seconds=30),
        exclusions=["holidays:US", "2030-01-03..2030-01-04"],
    )
    make_scheduler("node-a", clock).step()
    assert not JobRun.objects.exists()  # 2030-01-01 is New Year's Day
    daily.refresh_from_db()
    assert daily.next_run_at == T0 + timedelta(days=1)
    past = job("past-noon", cron="0 12 * * *", exclusions=["holidays:US", "2026-01-03..2026-01-04"])
    noon = datetime(2026, 1, 1, 12, tzinfo=UTC)
    plan = plan_backfill(past, noon - timedelta(days=2), noon + timedelta(days=4))
    assert plan.slots == [
        noon - timedelta(days=1),
        noon + timedelta(days=1),
        noon + timedelta(days=4),
    ]


def full_clean_errors(**values) -> dict[str, list[str]]:
    fields = {"name": "x", "cron": "* * * * *", "timezone": "UTC", "task": "tests.add"}
    fields.update(values)
    try:
        JobDefinition(args=[1, 2], **fields).full_clean()
    except ValidationError as exc:
        return exc.message_dict
    return {}


def test_the_model_names_what_is_wrong_with_each_kind() -> None:
    assert "shortest interval" in full_clean_errors(cron="@every 0s")["cron"][0]
    assert "largest to the smallest" in full_clean_errors(cron="@every 30m1h")["cron"][0]
    past = full_clean_errors(cron="@at 2020-01-01T00:00")
    assert "has passed" in past["cron"][0]
    assert (
        "no calendar for the country"
        in full_clean_errors(exclusions=["holidays:XX"])["exclusions"][0]
    )
    assert "list of rules" in full_clean_errors(exclusions="2026-12-24")["exclusions"][0]
    never = full_clean_errors(cron="0 0 25 12 *", exclusions=["holidays:US"])
    assert "would never run" in never["exclusions"][0]
    assert full_clean_errors(cron="@every 7m", exclusions=["holidays:DE-BY"]) == {}
    ahead = (dj_timezone.now() + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    assert full_clean_errors(cron=f"@at {ahead}") == {}


def test_a_one_off_that_has_run_can_still_be_edited() -> None:
    once = JobDefinition.objects.create(
        name="done", cron="@at 2020-01-01T00:00Z", timezone="UTC", task="tests.add", args=[1, 2]
    )
    once = JobDefinition.objects.get(pk=once.pk)
    once.description = "kept for the record"
    once.full_clean()  # its schedule is unchanged: no "has passed"


@pytest.fixture
def api_admin():
    from django.contrib.auth.models import User

    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("api", "a@example.com", "pw"))
    return client


def test_the_api_preview_lists_excluded_dates_and_why(api_admin) -> None:
    # Every day of December: the next 40 fire times always hold a December 25th.
    response = api_admin.get(
        "/cron/api/preview/",
        {
            "cron": "0 9 * 12 *",
            "timezone": "Europe/Berlin",
            "count": 40,
            "exclusions": ["holidays:DE-BY"],
        },
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert any(reason.endswith("-12-25: Christmas Day (DE-BY)") for reason in body["excluded"])
    assert not any("-12-25T" in due for due in body["fire_times"])
    bad = api_admin.get("/cron/api/preview/", {"cron": "@daily", "exclusions": ["holidays:XX"]})
    assert bad.status_code == 400
    assert "exclusions" in bad.json()
    interval = api_admin.get("/cron/api/preview/", {"cron": "@every 90s", "count": 2})
    first, second = (
        datetime.fromisoformat(t.replace("Z", "+00:00")) for t in interval.json()["fire_times"]
    )
    assert second - first == timedelta(seconds=90)
    assert first.timestamp() % 90 == 0
    assert interval.json()["description"] == "Every 1 minute 30 seconds (elapsed time)"


def test_the_admin_preview_says_which_dates_are_excluded(admin_client) -> None:
    response = admin_client.get(
        reverse("admin:django_cluster_cron_job_preview"),
        {"cron": "0 0 1 1 *", "timezone": "UTC", "exclusions": "2099-01-01\nholidays:US"},
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "No preview" not in page
    assert "Excluded: " in page
    assert "New Year" in page
    bad = admin_client.get(
        reverse("admin:django_cluster_cron_job_preview"),
        {"cron": "@daily", "timezone": "UTC", "exclusions": "2026-02-30"},
    ).content.decode()
    assert "No preview" in bad
    assert "no such date" in bad


def test_the_admin_form_takes_exclusions_one_per_line(admin_client) -> None:
    response = post(
        admin_client,
        name="holiday-aware",
        cron="0 9 * * 1-5",
        timezone="Europe/Berlin",
        exclusions="holidays:DE-BY\n2026-12-28..2026-12-31",
    )
    assert response.status_code == 302, field_errors(response, "exclusions")
    saved = JobDefinition.objects.get(name="holiday-aware")
    assert saved.exclusions == ["holidays:DE-BY", "2026-12-28..2026-12-31"]
    change = admin_client.get(
        reverse("admin:django_cluster_cron_jobdefinition_change", args=[saved.pk])
    ).content.decode()
    assert "holidays:DE-BY\n2026-12-28..2026-12-31" in change


def test_the_admin_form_names_a_bad_exclusion(admin_client) -> None:
    response = post(admin_client, exclusions="holidays:DE-ZZ")
    assert response.status_code == 200
    [error] = field_errors(response, "exclusions")
    assert "no subdivision 'ZZ'" in error


def test_the_api_creates_jobs_of_every_kind_and_names_a_bad_rule(api_admin) -> None:
    base = {"timezone": "Europe/Berlin", "task": "tests.add", "args": [1, 2]}
    ahead = (dj_timezone.now() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    for name, schedule, exclusions in (
        ("api-every", "@every 7m", ["holidays:DE-BY", "2026-12-24"]),
        ("api-once", f"@at {ahead}", []),
        ("api-solar", "@solar sunrise 48.1374 11.5755", []),
    ):
        response = api_admin.post(
            "/cron/api/jobs/",
            {**base, "name": name, "cron": schedule, "exclusions": exclusions},
            format="json",
        )
        assert response.status_code == 201, response.content
        assert response.json()["exclusions"] == exclusions
        assert JobDefinition.objects.get(name=name).next_run_at is not None
    bad = api_admin.post(
        "/cron/api/jobs/",
        {**base, "name": "api-bad", "cron": "@daily", "exclusions": ["2026-13-01"]},
        format="json",
    )
    assert bad.status_code == 400
    assert "month must be in 1..12" in bad.json()["exclusions"][0]
    wrong_type = api_admin.post(
        "/cron/api/jobs/",
        {**base, "name": "api-bad", "cron": "@daily", "exclusions": {"dates": []}},
        format="json",
    )
    assert wrong_type.status_code == 400
    assert "exclusions" in wrong_type.json()


def test_jobs_of_one_cron_with_different_exclusions_keep_their_own_slots(make_scheduler):
    """The leader shares one plan between jobs whose slots are the same: exclusions make them
    differ (found by a review: the job planned first decided the other's dates)."""
    watermark = T0 - timedelta(seconds=30)
    plain = job("plain", cron="0 12 * * *", watermark=watermark)
    skips = job("skips-2nd", cron="0 12 * * *", watermark=watermark, exclusions=["2030-01-02"])
    other = job("skips-3rd", cron="0 12 * * *", watermark=watermark, exclusions=["2030-01-03"])
    clock = Clock(T0 + timedelta(seconds=1))
    scheduler = make_scheduler("node-a", clock)
    for _ in range(3):
        scheduler.step()
        clock.advance(86_400)

    def slots(of: JobDefinition) -> list[datetime]:
        return sorted(JobRun.objects.filter(job=of).values_list("scheduled_for", flat=True))

    day = timedelta(days=1)
    assert slots(plain) == [T0, T0 + day, T0 + 2 * day]
    assert slots(skips) == [T0, T0 + 2 * day]
    assert slots(other) == [T0, T0 + day]
