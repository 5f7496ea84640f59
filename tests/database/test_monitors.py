"""The cron monitors fed by real runs: the worker's code path in this process (``apply``), the
leader's lost-run sweep (a scheduler stepped by hand), the real sentry-sdk sending to a stand-in
for Sentry's ingest endpoint, and pings to a local HTTP server (both ``RecordingServer``).
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import pytest

from django_cluster_cron import signals
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from django_cluster_cron.ops import monitors
from django_cluster_cron.ops.monitors import check_in_id, unmonitorable_jobs
from tests.support.httpserver import RecordingServer, envelope_items, sentry_stand_in
from tests.support.inprocess import T0, Clock
from tests.support.jobs import apply, make_job, make_run
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def use_monitors(settings):
    """``use_monitors(*entries)``: CLUSTER_CRON["MONITORS"] for this test, receivers connected."""

    def use(*entries):
        settings.CLUSTER_CRON = {**getattr(settings, "CLUSTER_CRON", {}), "MONITORS": list(entries)}
        monitors.install()

    yield use
    monitors.disconnect()


@pytest.fixture
def sentry():
    """The real sentry-sdk, its DSN pointing at a local server standing in for Sentry."""
    with sentry_stand_in(environment="monitors-test") as server:
        yield server


def job_with(*, name=None, cron="0 3 * * *", timezone="UTC", **fields):
    """A job of ``make_job`` (paused: no scheduler records it) with this name and schedule."""
    job = make_job(**fields)
    JobDefinition.objects.filter(pk=job.pk).update(
        name=name or job.name, cron=cron, timezone=timezone
    )
    job.refresh_from_db()
    return job


def check_ins(server: RecordingServer) -> list[dict[str, Any]]:
    found = []
    for _, path, body, _ in server.seen():
        if path.startswith("/api/1/envelope/"):
            found += [json.loads(p) for h, p in envelope_items(body) if h["type"] == "check_in"]
    return found


def wait_check_ins(server: RecordingServer, count: int) -> list[dict[str, Any]]:
    monitors.flush(10)
    return wait_for(
        lambda: check_ins(server) if len(check_ins(server)) >= count else [],
        60,
        f"{count} check-ins at the stand-in Sentry",
        detail=lambda: check_ins(server),
    )


def statuses(found: list[dict[str, Any]], run: JobRun) -> list[tuple[str, int | None]]:
    return [
        (c["status"], next(a for a in range(1, 5) if c["check_in_id"] == ids(run, a)))
        for c in found
        if c["check_in_id"] in {ids(run, a) for a in range(1, 5)}
    ]


def ids(run: JobRun, attempt: int) -> str:
    return check_in_id(run.pk, run.task_id, attempt)


# -- Sentry Crons -----------------------------------------------------------------------------


def test_sentry_sees_a_run_start_and_succeed_and_the_monitor_upserted(sentry, use_monitors):
    use_monitors({"sink": "sentry", "margin": 90, "failure_issue_threshold": 2})
    job = job_with(
        args=["sentry-ok"], cron="*/15 * * * *", timezone="Europe/Berlin", time_limit=300, jitter=30
    )
    run = apply(make_run(job))
    assert run.status == RunStatus.SUCCESS

    opened, closed = wait_check_ins(sentry, 2)
    assert opened["status"] == "in_progress"
    assert opened["duration"] is None
    assert closed["status"] == "ok"
    assert closed["check_in_id"] == opened["check_in_id"] == ids(run, 1)
    assert closed["duration"] == pytest.approx(run.duration.total_seconds())
    for check_in in (opened, closed):
        assert check_in["monitor_slug"] == job.name
        assert check_in["environment"] == "monitors-test"
        assert check_in["monitor_config"] == {
            "schedule": {"type": "crontab", "value": "*/15 * * * *"},
            "timezone": "Europe/Berlin",
            "checkin_margin": 2,  # 90 s margin + 30 s jitter
            "max_runtime": 5,
            "failure_issue_threshold": 2,
        }


def test_sentry_sees_a_failed_run_as_an_error(sentry, use_monitors):
    use_monitors({"sink": "sentry"})
    run = apply(make_run(job_with(task="tests.fail", cron="0 3 * * *")))
    assert run.status == RunStatus.FAILED
    assert statuses(wait_check_ins(sentry, 2), run) == [("in_progress", 1), ("error", 1)]


def test_a_retried_attempt_closes_as_an_error_and_the_next_opens_its_own(sentry, use_monitors):
    use_monitors({"sink": "sentry"})
    job = make_job(task="tests.flaky", args=["sentry-flaky", 1], max_retries=1, retry_backoff=0)
    run = apply(make_run(job))
    assert run.status == RunStatus.RETRYING
    run = apply(run, attempt=2)
    assert run.status == RunStatus.SUCCESS
    assert statuses(wait_check_ins(sentry, 4), run) == [
        ("in_progress", 1),
        ("error", 1),
        ("in_progress", 2),
        ("ok", 2),
    ]


def test_a_skipped_run_is_ok_for_sentry(sentry, use_monitors):
    use_monitors({"sink": "sentry"})
    run = apply(make_run(make_job(task="tests.ignore")))
    assert run.status == RunStatus.SKIPPED
    assert statuses(wait_check_ins(sentry, 2), run) == [("in_progress", 1), ("ok", 1)]


@pytest.mark.parametrize(("retries", "after"), [(1, RunStatus.RETRYING), (0, RunStatus.FAILED)])
def test_the_leader_closes_a_lost_runs_check_in_once(
    sentry, use_monitors, make_scheduler, retries, after
):
    """The worker opened the check-in and died; the leader's sweep, in another process in
    production, closes the same check-in id as an error (once, though a lost run with no retry
    left sends run_lost and run_failed)."""
    use_monitors({"sink": "sentry"})
    job = make_job(max_retries=retries)
    run = make_run(job, status=RunStatus.RUNNING)
    seen = T0 - timedelta(minutes=5)
    JobRun.objects.filter(pk=run.pk).update(started_at=seen, heartbeat_at=seen)
    run.refresh_from_db()
    signals.send(signals.run_started, run)  # what the worker sent before it died
    make_scheduler("node-a", Clock(T0)).step()
    run.refresh_from_db()
    assert run.status == after
    found = wait_check_ins(sentry, 2)
    assert statuses(found, run) == [("in_progress", 1), ("error", 1)]
    assert found[1]["duration"] == pytest.approx(300, abs=1)


def test_a_job_five_fields_cannot_say_is_said_once_and_still_checks_in(
    sentry, use_monitors, caplog
):
    use_monitors({"sink": "sentry", "exclude": ["quiet-*"]})
    job = job_with(args=["every-10s"], cron="* * * * * */10")
    job_with(name="quiet-job", args=["never"], cron="* * * * * */10")
    caplog.set_level(logging.WARNING, "django_cluster_cron.monitors")
    first, second = apply(make_run(job)), apply(make_run(job))
    found = wait_check_ins(sentry, 4)
    assert [c["status"] for c in found] == ["in_progress", "ok", "in_progress", "ok"]
    assert all("monitor_config" not in c for c in found)
    assert {c["check_in_id"] for c in found} == {ids(first, 1), ids(second, 1)}
    warned = [r.getMessage() for r in caplog.records if "monitors.unmonitorable" in r.getMessage()]
    assert len(warned) == 1
    assert f"job={job.name}" in warned[0]
    assert "more than once a minute" in warned[0]
    [listed] = unmonitorable_jobs()
    assert (listed.job, listed.sink) == (job.name, "0:sentry")


def test_without_an_active_sentry_client_nothing_is_sent_and_that_is_said(use_monitors, caplog):
    use_monitors({"sink": "sentry"})
    caplog.set_level(logging.WARNING, "django_cluster_cron.monitors")
    run = apply(make_run(make_job(args=["no-sentry"])))
    assert run.status == RunStatus.SUCCESS
    assert caplog.text.count("monitors.sentry_inactive") == 1


# -- pings ------------------------------------------------------------------------------------


def test_pings_say_start_success_and_fail_of_real_runs(use_monitors):
    with RecordingServer() as server:
        use_monitors({"sink": "ping", "url": server.url + "/ping/{slug}", "jobs": ["hc-*"]})
        good = apply(make_run(job_with(name="hc-good", args=["hc"])))
        bad = apply(make_run(job_with(name="hc-bad", task="tests.fail")))
        apply(make_run(job_with(name="other", args=["not-watched"])))
        assert monitors.flush(30)
        assert server.paths() == [
            f"/ping/hc-good/start?rid={ids(good, 1)}",
            f"/ping/hc-good?rid={ids(good, 1)}",
            f"/ping/hc-bad/start?rid={ids(bad, 1)}",
            f"/ping/hc-bad/fail?rid={ids(bad, 1)}",
        ]
        method, _, body, _ = server.seen()[3]
        assert (method, body) == ("POST", b"RuntimeError: tests.fail always raises")


def test_a_sink_that_raises_is_logged_and_the_run_and_other_sinks_go_on(use_monitors, caplog):
    with RecordingServer() as server:
        use_monitors(
            {"sink": f"{__name__}.Broken"},
            {"sink": "ping", "url": server.url + "/{slug}", "run_id_param": None},
        )
        job = make_job(args=["robust-monitor"])
        run = apply(make_run(job))
        assert run.status == RunStatus.SUCCESS
        assert monitors.flush(30)
        assert server.paths() == [f"/{job.name}/start", f"/{job.name}"]
        assert caplog.text.count("monitors.sink_failed sink=0:") == 2


class Broken(monitors.MonitorSink):
    def started(self, monitor, check_in):
        raise RuntimeError("the monitoring service is down")

    finished = started


def test_with_no_monitors_configured_nothing_is_connected(settings):
    monitors.install()
    receivers = [r for r in signals.run_started.receivers if "cluster_cron_monitors" in str(r)]
    assert not receivers
    assert unmonitorable_jobs() == []
