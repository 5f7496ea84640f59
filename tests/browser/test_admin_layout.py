"""The admin at a glance on real screens: the lists fit a laptop without scrolling sideways,
every time shows its seconds, and a phone can still use the lists."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger

from .test_admin_in_a_browser import login

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240), pytest.mark.django_db(transaction=True)]

SCREENS = {"laptop": (1366, 768), "desktop": (1920, 1080)}
STATUSES = [RunStatus.SUCCESS] * 14 + [
    RunStatus.FAILED,
    RunStatus.RETRYING,
    RunStatus.SKIPPED,
    RunStatus.MISSED,
    RunStatus.RUNNING,
    RunStatus.QUEUED,
]
# A time of day without its seconds ("12:17", "12:17 p.m."), outside a cron's description.
MINUTES_ONLY = re.compile(r"(?<![\d:])\d{1,2}:\d\d(?![:\d])")


def realistic_jobs() -> JobDefinition:
    """Names, tasks and worker ids as long as real projects have them; 20 runs each."""
    now = timezone.now().replace(microsecond=0)
    crons = ["* * * * * */5", "0 9 * * 1-5", "30 2 * * *", "15,45 8-18 * * mon-fri", "0 0 1 * *"]
    zones = ["Europe/Berlin", "America/Los_Angeles", "Asia/Kolkata", "UTC", "Australia/Sydney"]
    first = None
    for i in range(8):
        job = JobDefinition(
            name=f"billing-generate-monthly-invoices-and-send-reminders-{i}",
            cron=crons[i % len(crons)],
            timezone=zones[i % len(zones)],
            task="tests.add",
            args=[1, 2],
            pause_note="",
        )
        job.full_clean()
        job.save()
        first = first or job
        runs = []
        for k, status in enumerate(STATUSES):
            slot = now - timedelta(seconds=5 * (len(STATUSES) - k))
            runs.append(
                JobRun(
                    job=job,
                    scheduled_for=slot,
                    task_id=job.task_id_for(slot),
                    trigger=RunTrigger.SCHEDULE,
                    status=status,
                    attempt=2 if status == RunStatus.RETRYING else 1,
                    queued_at=slot,
                    started_at=slot + timedelta(milliseconds=40),
                    finished_at=slot + timedelta(seconds=1, milliseconds=500),
                    duration=timedelta(seconds=1, milliseconds=460),
                    worker=f"celery@worker-prod-eu-central-1a-7f9c8d6b5-x2k4p:{1000 + k}",
                    dispatched_by="scheduler-prod-eu-central-1a-0",
                    epoch=7,
                    reason="the task raised Ignore" if status == RunStatus.SKIPPED else "",
                )
            )
        JobRun.objects.bulk_create(runs)
    assert first is not None
    return first


def overflow(page, selector: str) -> int:
    """How many pixels ``selector`` (or the page, for "document") is wider than its box."""
    if selector == "document":
        script = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        return int(page.evaluate(script))
    return int(page.locator(selector).evaluate("e => e.scrollWidth - e.clientWidth"))


def times_without_seconds(page) -> list[str]:
    shown = [t.replace("\xa0", " ") for t in page.locator("time.dcc-time").all_text_contents()]
    bad = [
        text
        for text in shown
        if not re.fullmatch(r"(\d{4}-\d\d-\d\d\s)?\d\d:\d\d:\d\d [A-Za-z0-9+\-]+", text)
    ]
    # Any other time of day in the lists and pages, apart from a schedule in words.
    page.evaluate(
        "document.querySelectorAll('.dcc-words, .field-schedule small, .field-upcoming p')"
        ".forEach(e => e.remove())"
    )
    text = page.locator("#content").inner_text()
    return bad + MINUTES_ONLY.findall(text)


@pytest.mark.parametrize("screen", list(SCREENS))
def test_the_lists_fit_the_screen_and_every_time_has_its_seconds(
    browser, live_server, admin_user, screenshot_dir, screen
):
    job = realistic_jobs()
    run = JobRun.objects.filter(job=job).order_by("pk").first()
    width, height = SCREENS[screen]
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        login(page, live_server)
        pages = {
            "jobs-list": ("/admin/django_cluster_cron/jobdefinition/", "#changelist .results"),
            "run-ledger": ("/admin/django_cluster_cron/jobrun/", "#changelist .results"),
            "job-page": (f"/admin/django_cluster_cron/jobdefinition/{job.pk}/change/", None),
            "run-page": (f"/admin/django_cluster_cron/jobrun/{run.pk}/change/", None),
            "coming-dispatches": ("/admin/django_cluster_cron/jobdefinition/coming/", None),
            "cluster-status": ("/admin/django_cluster_cron/clusterstatus/", None),
        }
        for name, (path, table) in pages.items():
            page.goto(live_server.url + path)
            page.wait_for_selector("#content")
            page.screenshot(path=str(screenshot_dir / f"{name}-{width}x{height}.png"))
            assert overflow(page, "document") <= 0, f"{name} scrolls sideways at {screen}"
            if table:
                cut = overflow(page, table)
                assert cut <= 0, f"{name}: the table is {cut} px wider than a {width} px screen"
            assert times_without_seconds(page) == [], name
    finally:
        context.close()


def test_on_a_phone_the_lists_scroll_inside_their_box_and_keep_the_name_in_view(
    browser, live_server, admin_user, screenshot_dir
):
    realistic_jobs()
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        login(page, live_server)
        for name, path in (
            ("jobs-list", "/admin/django_cluster_cron/jobdefinition/"),
            ("run-ledger", "/admin/django_cluster_cron/jobrun/"),
        ):
            page.goto(live_server.url + path)
            page.wait_for_selector("#result_list")
            page.screenshot(path=str(screenshot_dir / f"{name}-390x844.png"))
            assert overflow(page, "document") <= 0, f"{name}: the page scrolls sideways"
            first_cell = page.locator("#result_list tbody tr").first.locator("th, td").nth(1)
            box = first_cell.bounding_box()
            assert box is not None
            assert box["x"] < 390, f"{name}: the first column is off the screen"
    finally:
        context.close()
