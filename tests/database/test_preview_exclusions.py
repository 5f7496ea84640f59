"""The schedule previews (the admin's and the API's ``preview/``): the next dates a job's
exclusions leave out, however far beyond the runs listed; and the API's preview of a saved job
by its id."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from django_cluster_cron.core.exclusions import ExcludingSchedule
from django_cluster_cron.models import JobDefinition
from django_cluster_cron.schedule import parse

pytestmark = pytest.mark.django_db
holidays = pytest.importorskip("holidays")

API = "/cron/api"
# The holidays how-to's own example.
RULES = ["holidays:DE-BY", "2026-12-24", "2026-12-28..2026-12-31"]
HOWTO = {"cron": "0 9 * * mon-fri", "timezone": "Europe/Berlin", "exclusions": RULES}


def excluding(job_or_schedule: object) -> ExcludingSchedule:
    schedule = getattr(job_or_schedule, "schedule", job_or_schedule)
    assert isinstance(schedule, ExcludingSchedule)
    return schedule


@pytest.fixture
def api_admin():
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("api", "a@example.com", "pw"))
    return client


def next_holidays(country: str, zone: str, weekdays: range, count: int) -> list[tuple[date, str]]:
    """The next public holidays on the given weekdays, from the package's calendar itself."""
    today = datetime.now(ZoneInfo(zone)).date()
    found: list[tuple[date, str]] = []
    for year in (today.year, today.year + 1, today.year + 2):
        calendar = holidays.country_holidays(country, years=year, language="en_US")
        found += sorted(
            (day, name)
            for day, name in calendar.items()
            if day > today and day.weekday() in weekdays
        )
    return found[:count]


def test_the_admin_preview_of_a_minutely_job_names_its_next_public_holidays(admin_client):
    page = admin_client.get(
        reverse("admin:django_cluster_cron_job_preview"),
        {"cron": "* * * * *", "timezone": "America/New_York", "exclusions": "holidays:US"},
    ).content.decode()
    assert "No preview" not in page
    for day, name in next_holidays("US", "America/New_York", range(7), 3):
        assert f"{day}: {name} (US)" in page.replace("&#x27;", "'")


def test_the_admin_preview_of_the_holidays_howto_example_names_its_next_excluded_dates(
    admin_client,
):
    page = admin_client.get(
        reverse("admin:django_cluster_cron_job_preview"),
        {**HOWTO, "exclusions": "\n".join(RULES)},
    ).content.decode()
    schedule = excluding(parse("0 9 * * mon-fri", "Europe/Berlin", exclusions=RULES))
    expected = schedule.excluded_ahead(timezone.now(), timezone.now(), 3)
    assert len(expected) == 3
    assert "Excluded" in page
    for fire, reason in expected:
        assert reason in page
        assert f"{fire.astimezone(schedule.zone):%a %H:%M %Z}" in page


def test_the_job_page_previews_its_next_excluded_dates(admin_client):
    job = JobDefinition(name="weekday", task="tests.echo", **HOWTO)
    job.full_clean()
    job.save()
    page = admin_client.get(
        reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
    ).content.decode()
    [(_, reason), *_] = excluding(job).excluded_ahead(timezone.now(), timezone.now(), 1)
    assert reason in page


def test_the_api_preview_names_the_next_excluded_dates_with_the_runs_they_leave_out(api_admin):
    response = api_admin.get(
        f"{API}/preview/",
        {"cron": "* * * * *", "timezone": "America/New_York", "exclusions": ["holidays:US"]},
    )
    assert response.status_code == 200, response.content
    body = response.json()
    expected = next_holidays("US", "America/New_York", range(7), 3)
    assert body["excluded"] == [f"{day}: {name} (US)" for day, name in expected]
    zone = ZoneInfo("America/New_York")
    assert [datetime.fromisoformat(at.replace("Z", "+00:00")) for at in body["excluded_at"]] == [
        datetime(d.year, d.month, d.day, tzinfo=zone) for d, _ in expected
    ]


def test_the_api_preview_of_a_job_by_its_id_previews_that_job(api_admin):
    job = JobDefinition(name="weekday", task="tests.echo", jitter=120, **HOWTO)
    job.full_clean()
    job.save()
    response = api_admin.get(f"{API}/preview/", {"job": job.pk, "count": 5})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["cron"], body["timezone"]) == (HOWTO["cron"], HOWTO["timezone"])
    now = timezone.now()
    upcoming = job.timing().upcoming(job.schedule, now, 5)
    assert body["fire_times"] == [
        due.astimezone(ZoneInfo("UTC")).isoformat().replace("+00:00", "Z") for _, due in upcoming
    ]
    assert body["excluded"][0] == excluding(job).excluded_ahead(now, now, 1)[0][1]
    # Any parameter given replaces that field of the job: an edit, previewed before it is saved.
    edited = api_admin.get(f"{API}/preview/", {"job": job.pk, "cron": "0 7 * * *"}).json()
    assert (edited["cron"], edited["timezone"]) == ("0 7 * * *", "Europe/Berlin")
    first = datetime.fromisoformat(edited["slots"][0].replace("Z", "+00:00"))
    assert first.astimezone(ZoneInfo("Europe/Berlin")).hour == 7


def test_the_api_preview_of_a_job_needs_the_right_to_view_jobs_and_an_existing_job(api_admin):
    job = JobDefinition(name="weekday", task="tests.echo", **HOWTO)
    job.full_clean()
    job.save()
    missing = api_admin.get(f"{API}/preview/", {"job": job.pk + 1000})
    assert missing.status_code == 400
    assert missing.json() == {"job": [f"There is no job {job.pk + 1000}."]}
    nothing = api_admin.get(f"{API}/preview/", {})
    assert nothing.status_code == 400
    assert "cron" in nothing.json()
    user = User.objects.create_user("plain", password="x")
    client = APIClient()
    client.force_authenticate(user)
    refused = client.get(f"{API}/preview/", {"job": job.pk})
    assert refused.status_code == 403
    assert "view_jobdefinition" in refused.json()["detail"]
    assert client.get(f"{API}/preview/", {"cron": "@daily"}).status_code == 200
    user.user_permissions.add(Permission.objects.get(codename="view_jobdefinition"))
    client.force_authenticate(User.objects.get(pk=user.pk))
    assert client.get(f"{API}/preview/", {"job": job.pk}).status_code == 200


def test_an_excluded_date_after_the_jobs_end_is_not_named(api_admin):
    end = timezone.now() + timedelta(days=2)
    response = api_admin.get(
        f"{API}/preview/",
        {"cron": "* * * * *", "exclusions": ["holidays:US"], "end_at": end.isoformat()},
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert all(
        datetime.fromisoformat(at.replace("Z", "+00:00")) <= end for at in body["excluded_at"]
    )
