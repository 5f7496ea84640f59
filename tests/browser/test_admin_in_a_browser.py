"""An operator's session in a real browser: create, fix, preview, run now, pause, cluster page."""

from __future__ import annotations

import re

import pytest

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240), pytest.mark.django_db(transaction=True)]


def login(page, live_server):
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    page.wait_for_selector("#content")


def test_an_operator_creates_fixes_runs_pauses_and_watches_the_cluster(
    page, live_server, admin_user, cluster, screenshot_dir
):
    cluster.worker("browser-worker")
    login(page, live_server)

    # A bad cron is refused on its field, with the reason.
    page.goto(f"{live_server.url}/admin/django_cluster_cron/jobdefinition/add/")
    page.fill("#id_name", "browser report")
    page.fill("#id_cron", "61 * * * *")
    page.select_option("#id_timezone", "Europe/Berlin")
    page.fill("#id_task", "tests.record")
    page.fill("#id_args", '["browser", 0]')
    page.click("input[name=_continue]")
    error = page.locator(".field-cron .errorlist")
    assert "minute field: '61' — 61 is out of range 0-59" in error.inner_text()
    assert not JobDefinition.objects.exists()

    # Typing the fix previews it at once, before anything is saved.
    page.fill("#id_cron", "*/5 * * * *")
    page.wait_for_selector(".dcc-preview .dcc-upcoming")
    assert page.locator(".dcc-upcoming tbody tr").count() == 10
    assert not JobDefinition.objects.exists()

    # Saved, the change page previews the next ten fire times in the job's zone.
    page.click("input[name=_continue]")
    page.wait_for_url(re.compile(r"/jobdefinition/\d+/change/"))
    page.wait_for_selector(".dcc-upcoming")
    rows = page.locator(".dcc-upcoming tbody tr")
    assert rows.count() == 10
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d[05]:00 CES?T", rows.first.inner_text())
    assert "Every 5 minutes" in page.locator(".field-upcoming").inner_text()
    job = JobDefinition.objects.get(name="browser report")

    # Run now: the run appears and a real worker takes it to success.
    cluster.wait_ready("browser-worker")
    page.click("button.dcc-run-now")
    page.wait_for_url(re.compile(r"/jobrun/\d+/change/"))
    run = JobRun.objects.get(job=job)
    wait_for(
        lambda: JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCESS).exists(),
        60,
        "the manual run to succeed",
    )
    page.reload()
    assert "success" in page.locator(".field-status_badge").inner_text()
    assert "manual" in page.locator(".field-trigger").inner_text().lower()

    # Pause with a note: the list shows the job paused, with the note.
    page.goto(f"{live_server.url}/admin/django_cluster_cron/jobdefinition/{job.pk}/change/")
    page.click("a.dcc-pause")
    page.fill("#id_note", "vendor API down until Monday")
    page.click("input[name=pause]")
    page.goto(f"{live_server.url}/admin/django_cluster_cron/jobdefinition/")
    row = page.locator("#result_list tbody tr", has_text="browser report")
    assert "paused" in row.inner_text()
    assert "vendor API down until Monday" in row.inner_text()
    assert row.locator("svg.dcc-strip rect").count() == 1
    page.screenshot(path=str(screenshot_dir / "jobs-list.png"), full_page=True)

    # The cluster page shows the node that leads. (Started only now: a scheduler running
    # earlier would record the job's next slot, every 5 minutes, ahead or at its time.)
    cluster.start("browser-node")

    def shows_the_leader():
        # The lease names the leader as soon as it is taken; the node's own report (the nodes
        # table) follows at the end of its first pass: wait for both on one page.
        page.goto(f"{live_server.url}/admin/django_cluster_cron/clusterstatus/")
        return "browser-node" in page.locator("#dcc-leader").inner_text() and (
            "leader" in page.locator("#dcc-nodes").inner_text()
        )

    wait_for(shows_the_leader, 60, "the cluster page to show the leader", interval=0.5)
    page.screenshot(path=str(screenshot_dir / "cluster-status.png"), full_page=True)
