"""The pieces of the cron monitors that need no database: a job's schedule as a crontab (checked
against cronsim, the implementation Sentry validates crontabs with), slugs, check-in ids, the
MONITORS entries, the Sentry sink's monitor configuration, and ping URLs sent for real to a local
HTTP server (tests/support/httpserver.py).
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from django.utils.text import slugify

from django_cluster_cron.conf import app_settings
from django_cluster_cron.models import JobDefinition
from django_cluster_cron.ops.monitors import CheckIn, Monitor, MonitorSink, check_in_id
from django_cluster_cron.ops.monitors.crontab import crontab_for, schedule_for, slug_for
from django_cluster_cron.ops.monitors.describe import monitor_for
from django_cluster_cron.ops.monitors.pings import Ping, Pinger, PingSink, with_suffix
from django_cluster_cron.ops.monitors.sentry import SentrySink, minutes
from django_cluster_cron.ops.monitors.specs import Watch, build
from django_cluster_cron.schedule import CronSchedule
from tests.support.httpserver import RecordingServer
from tests.support.waiting import wait_for

UTC = timezone.utc


# -- a job's schedule as a crontab ------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "crontab", "shift"),
    [
        ("*/15 * * * *", "*/15 * * * *", 0),
        ("@daily", "0 0 * * *", 0),
        ("30 2 * * MON-fri", "30 2 * * 1-5", 0),
        ("0 9 * jan,jul 7", "0 9 * 1,7 0", 0),
        ("0 0 L * *", "0 0 L * *", 0),
        ("0 0 * * L5", "0 0 * * 5L", 0),
        ("0 0 * * 5#2", "0 0 * * 5#2", 0),
        ("0 0 */2 * 1", "0 0 */2 * 1", 0),
        ("0 0 1,15 * 1", "0 0 1,15 * 1", 0),
        ("5-5/10 * * * *", "5 * * * *", 0),
        ("0 * * * * 0", "0 * * * *", 0),
        ("0 * * * * 30", "0 * * * *", 30),
    ],
)
def test_a_schedule_five_fields_can_say_is_given_as_a_canonical_crontab(cron, crontab, shift):
    found = crontab_for(cron)
    assert (found.text, found.shift, found.problem) == (crontab, shift, "")


@pytest.mark.parametrize(
    ("cron", "words"),
    [
        ("* * * * * */10", "more than once a minute"),
        ("0 0 */10,15 * 1", "two day fields must both match"),
        ("not a cron", "invalid"),
    ],
)
def test_a_schedule_five_fields_cannot_say_has_no_crontab_and_a_reason(cron, words):
    found = crontab_for(cron)
    assert found.text is None
    assert words in found.problem


CRONS = [
    "*/7 * * * *",
    "0 2-20/3 * * *",
    "0 0 L * *",
    "0 12 * * 5L",
    "0 6 * * 1#1,5#3",
    "0 0 */2 * 1",
    "0 0 1,L * 0",
    "30 4 29 2 *",
    "15 10 * jun-aug sat,sun",
    "0 * * * * 45",
]


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York"])
@pytest.mark.parametrize("cron", CRONS)
def test_every_crontab_given_fires_when_cronsim_says_so(cron, zone):
    """Sentry checks a monitor's crontab with cronsim: the crontab must mean our fire times."""
    crontab = crontab_for(cron)
    assert crontab.text is not None
    start = datetime(2024, 1, 1, tzinfo=UTC)
    ours = CronSchedule.parse(cron, zone).fire_times(start, 40)
    shifted = start - timedelta(seconds=crontab.shift)  # its minute fires after it, ours too
    theirs = CronSim(crontab.text, shifted.astimezone(ZoneInfo(zone)))
    expected = [next(theirs).astimezone(UTC) + timedelta(seconds=crontab.shift) for _ in ours]
    assert ours == expected


def test_slugs_are_what_sentry_would_make_of_them_and_long_names_stay_apart():
    assert slug_for("{job}", "Billing: nightly.report", 7) == "billing-nightly-report"
    assert slug_for("prod-{job}-{id}", "sync", 7) == "prod-sync-7"
    long_a = slug_for("{job}", "x" * 60 + "a", 1)
    long_b = slug_for("{job}", "x" * 60 + "b", 2)
    assert long_a != long_b
    for slug in (long_a, long_b):
        assert len(slug) <= 50
        assert slugify(slug) == slug


def test_a_check_in_id_belongs_to_one_attempt_of_one_run():
    first = check_in_id(12, "cron-3-20300101T000000Z", 1)
    assert first == check_in_id(12, "cron-3-20300101T000000Z", 1)
    assert len(first) == 32
    int(first, 16)
    assert first != check_in_id(12, "cron-3-20300101T000000Z", 2)
    assert first != check_in_id(13, "cron-3-20300101T000000Z", 1)


# -- a job as a monitor -----------------------------------------------------------------------


def _job(**fields) -> JobDefinition:
    values = {"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "task": "t"}
    return JobDefinition(pk=5, **{**values, **fields})


def test_the_margin_covers_the_jitter_and_the_seconds_and_the_time_limit_bounds_the_run():
    watch = build(0, {"sink": "ping", "url": "http://x/{slug}", "margin": 120})
    monitor = monitor_for(_job(cron="0 3 * * * 30", jitter=90, time_limit=600), watch)
    assert monitor.crontab == "0 3 * * *"
    assert monitor.margin == timedelta(seconds=120 + 90 + 30)
    assert monitor.max_runtime == timedelta(seconds=600)
    assert monitor_for(_job(soft_time_limit=300), watch).max_runtime == timedelta(seconds=300)
    assert monitor_for(_job(), watch).max_runtime is None
    default = build(0, {"sink": "ping", "url": "http://x/{slug}", "max_runtime": 3600})
    assert monitor_for(_job(), default).max_runtime == timedelta(hours=1)
    assert monitor_for(_job(), default).margin == timedelta(seconds=60)


# -- the MONITORS entries ---------------------------------------------------------------------


class Collecting(MonitorSink):
    def __init__(self, tag: str = "") -> None:
        self.tag = tag


def test_an_entry_chooses_its_jobs_by_name_and_trigger():
    watch = build(
        0,
        {
            "sink": f"{__name__}.Collecting",
            "tag": "x",
            "jobs": ["billing.*", "reports.daily"],
            "exclude": ["billing.test*"],
            "triggers": ["schedule", "catchup"],
        },
    )
    assert isinstance(watch.sink, Collecting)
    assert watch.sink.tag == "x"
    assert watch.watches("billing.invoices", "schedule")
    assert watch.watches("reports.daily")
    assert not watch.watches("billing.testing", "schedule")
    assert not watch.watches("reports.weekly", "schedule")
    assert not watch.watches("billing.invoices", "manual")
    assert isinstance(build(0, {"sink": "ping", "url": "http://x/{slug}"}), Watch)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"sink": "nowhere.Sink"}, "cannot import sink 'nowhere.Sink'"),
        ({"sink": "django_cluster_cron.models.JobDefinition"}, "not a MonitorSink subclass"),
        ({"sink": "ping"}, "give 'url'"),
        ({"sink": "ping", "url": "file:///etc/passwd"}, "http:// or https://"),
        ({"sink": "ping", "url": "http://x/{nope}"}, "{slug} and {job} only"),
        ({"sink": "ping", "url": "http://x", "suffixes": {"begin": "/b"}}, "unknown ping kinds"),
        ({"sink": "ping", "url": "http://x", "colour": "red"}, "unexpected keyword"),
        ({"sink": "ping", "url": "http://x", "jobs": "billing.*"}, "'jobs' must be a list"),
        ({"sink": "ping", "url": "http://x", "margin": -1}, "'margin' must be"),
        ({"sink": "ping", "url": "http://x", "slug": "{name}"}, "'slug' may use"),
        ({"sink": "sentry", "failure_issue_threshold": 0}, "from 1 to 720"),
        ({"sink": "sentry", "owner": "bob"}, "'user:<id>' or 'team:<id>'"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(spec, words):
    with pytest.raises(ImproperlyConfigured, match=r"\['MONITORS'\]\[3\]") as caught:
        build(3, spec)
    assert words in str(caught.value)


@pytest.mark.parametrize("value", ["sentry", [{"url": "http://x"}], [{"sink": ""}], {"a": 1}])
def test_the_setting_must_be_a_list_of_entries_naming_their_sink(value):
    with (
        override_settings(CLUSTER_CRON={"MONITORS": value}),
        pytest.raises(ImproperlyConfigured, match="MONITORS"),
    ):
        app_settings.MONITORS  # noqa: B018


def test_the_setting_is_empty_by_default():
    with override_settings(CLUSTER_CRON={}):
        assert app_settings.MONITORS == ()


# -- the Sentry sink's monitor ----------------------------------------------------------------


def _monitor(**fields) -> Monitor:
    values = {
        "slug": "nightly",
        "job": "nightly",
        "job_id": 5,
        "cron": "0 3 * * *",
        "crontab": "0 3 * * *",
        "problem": "",
        "timezone": "Europe/Berlin",
        "margin": timedelta(seconds=61),
        "max_runtime": timedelta(seconds=600),
    }
    return Monitor(**{**values, **fields})


def test_the_sentry_monitor_config_is_in_whole_minutes_rounded_up():
    sink = SentrySink(failure_issue_threshold=2, owner="team:4")
    assert sink.config(_monitor()) == {
        "schedule": {"type": "crontab", "value": "0 3 * * *"},
        "timezone": "Europe/Berlin",
        "checkin_margin": 2,
        "max_runtime": 10,
        "failure_issue_threshold": 2,
        "owner": "team:4",
    }
    assert "max_runtime" not in (SentrySink().config(_monitor(max_runtime=None)) or {})
    assert SentrySink().config(_monitor(crontab=None, problem="seconds")) is None
    every = SentrySink().config(_monitor(cron="@every 90m", crontab=None, interval=(90, "minute")))
    assert (every or {})["schedule"] == {"type": "interval", "value": 90, "unit": "minute"}


@pytest.mark.parametrize(
    ("cron", "exclusions", "interval", "words"),
    [
        ("@every 7m", None, (7, "minute"), ""),
        ("@every 1h30m", None, (90, "minute"), ""),
        ("@every 36h", None, (36, "hour"), ""),
        ("@every 2d", [], (2, "day"), ""),
        ("@every 14d", None, (2, "week"), ""),
        ("@every 90s", None, None, "not whole minutes"),
        ("@at 2026-12-24T18:00", None, None, "one-off"),
        ("0 9 * * 1-5", ["holidays:DE-BY"], None, "missed check-in"),
    ],
)
def test_other_kinds_of_schedule_as_a_monitor_carries_them(cron, exclusions, interval, words):
    found = schedule_for(cron, exclusions)
    assert found.text is None
    assert found.interval == interval
    assert words in found.problem
    assert schedule_for("0 3 * * *").text == "0 3 * * *"
    assert minutes(timedelta(0)) == 1
    assert minutes(timedelta(days=60)) == 40_320


# -- pings ------------------------------------------------------------------------------------


def _check_in(status="in_progress", outcome="started", **fields) -> CheckIn:
    values = {
        "check_in_id": "ab" * 16,
        "run_id": 9,
        "attempt": 1,
        "slot": datetime(2030, 1, 1, tzinfo=UTC),
        "trigger": "schedule",
    }
    return CheckIn(status=status, outcome=outcome, **{**values, **fields})


def ping_of(sink: PingSink, monitor: Monitor, check_in: CheckIn) -> Ping:
    ping = sink.ping_for(monitor, check_in)
    assert ping is not None
    return ping


def test_each_kind_of_check_in_pings_its_url():
    sink = PingSink(url="https://hc-ping.com/KEY/{slug}?create=1")
    monitor = _monitor(slug="night-ly", job="night ly/1")
    urls = {
        kind: ping_of(sink, monitor, _check_in(status, outcome, retried=retried))
        for kind, status, outcome, retried in [
            ("start", "in_progress", "started", False),
            ("success", "ok", "succeeded", False),
            ("skip", "ok", "skipped", False),
            ("fail", "error", "failed", False),
            ("retry", "error", "retrying", True),
        ]
    }
    rid = "rid=" + "ab" * 16
    assert urls["start"].url == f"https://hc-ping.com/KEY/night-ly/start?create=1&{rid}"
    assert urls["success"].url == f"https://hc-ping.com/KEY/night-ly?create=1&{rid}"
    assert urls["skip"].url == urls["success"].url
    assert urls["fail"].url == f"https://hc-ping.com/KEY/night-ly/fail?create=1&{rid}"
    assert urls["retry"].url == urls["fail"].url
    assert urls["start"].body is None
    assert urls["fail"].body == b""


def test_a_job_url_table_suffixes_and_no_run_id_can_be_chosen():
    sink = PingSink(
        url="https://cronitor.link/p/KEY/{job}",
        urls={"nightly": "https://example.com/ping/abc"},
        suffixes={"start": "?state=run", "retry": None},
        run_id_param=None,
    )
    failed = _check_in("error", "failed", error="RuntimeError: boom")
    assert ping_of(sink, _monitor(), failed).url == "https://example.com/ping/abc/fail"
    assert ping_of(sink, _monitor(), failed).body == b"RuntimeError: boom"
    other = _monitor(job="a b")
    assert ping_of(sink, other, _check_in()).url == "https://cronitor.link/p/KEY/a%20b?state=run"
    assert sink.ping_for(other, _check_in("error", "retrying", retried=True)) is None
    assert with_suffix("http://h/x/", "/fail", {}) == "http://h/x/fail"


def test_pings_are_sent_in_order_off_the_callers_thread_and_failures_are_only_logged(caplog):
    with RecordingServer(status={"/down": 500}) as server:
        sink = PingSink(url=server.url + "/{slug}", timeout=2)
        monitor = _monitor()
        caplog.set_level(logging.WARNING, "django_cluster_cron.monitors")
        sink.started(monitor, _check_in())
        sink.finished(monitor, _check_in("error", "failed", error="boom"))
        sink.finished(_monitor(slug="down"), _check_in("ok", "succeeded"))
        sink.pinger.submit(Ping("http://127.0.0.1:1/refused"))
        assert sink.flush(30)
        seen = server.seen()
        assert [(method, path.split("?")[0]) for method, path, _, _ in seen] == [
            ("GET", "/nightly/start"),
            ("POST", "/nightly/fail"),
            ("GET", "/down"),
        ]
        assert seen[1][2] == b"boom"
        failed = [
            r.getMessage() for r in caplog.records if "monitors.ping_failed" in r.getMessage()
        ]
        assert len(failed) == 2
        assert any("500" in line for line in failed)


def test_a_full_queue_drops_the_ping_and_says_so(caplog):
    with RecordingServer() as server:
        server.hold = threading.Event()
        pinger = Pinger(timeout=30, size=1)
        ping = ping_of(PingSink(url=server.url + "/{slug}"), _monitor(), _check_in())
        pinger.submit(ping)  # taken by the thread, held by the server
        wait_for(lambda: pinger._queue.empty(), 30, "the first ping to leave the queue")
        pinger.submit(ping)  # waits in the queue
        pinger.submit(ping)  # no room
        assert "monitors.ping_dropped" in caplog.text
        assert not pinger.flush(0.05)
        server.hold.set()
        assert pinger.flush(30)
        assert len(server.seen()) == 2


def test_the_recording_server_reads_gzip_bodies():
    import urllib.request

    with RecordingServer() as server:
        body = gzip.compress(json.dumps({"a": 1}).encode())
        request = urllib.request.Request(
            server.url + "/x", data=body, headers={"Content-Encoding": "gzip"}
        )
        urllib.request.urlopen(request, timeout=10).read()
        assert json.loads(server.seen()[0][2]) == {"a": 1}
