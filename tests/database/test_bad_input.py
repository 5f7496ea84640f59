"""Bad input everywhere a user or the network can reach: each gets a clear error or is ignored
with a log line; nothing crashes the scheduler or a worker; no other job is affected (G6)."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_cluster_cron.core.errors import ScheduleError
from django_cluster_cron.core.timezones import get_zone
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus, RunTrigger
from django_cluster_cron.schedule import fire_times, validate_cron
from django_cluster_cron.tasks import execute_run
from django_cluster_cron.testing import NoWait
from django_cluster_cron.validation import clean_args, clean_kwargs, clean_task_name

UTC = timezone.utc
START = datetime(2024, 1, 1, tzinfo=UTC)
FIELD_TOKENS = st.sampled_from(
    [
        "*",
        "*/5",
        "0",
        "59",
        "60",
        "-1",
        "1-5",
        "5-1",
        "L",
        "L5",
        "5#2",
        "5#9",
        "?",
        "W",
        "H",
        "jan",
        "MON",
        "1,2",
        ",",
        "/",
        "*/0",
        "99999999999999999999",
        "٣",
        "５",
        "\x00",
        "é",
        "",
    ]
)
CRONISH = st.lists(FIELD_TOKENS, min_size=0, max_size=8).map(" ".join)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


# -- values a user types ----------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=300), CRONISH, st.sampled_from(["@reboot", "@every 5s", "* " * 200])
    )
)
def test_any_cron_text_is_either_accepted_and_fires_or_refused_with_a_cron_error(text):
    try:
        validate_cron(text)
    except ScheduleError as exc:
        assert exc.field == "cron"
        assert exc.message
        return
    assert fire_times(text, "UTC", START, 3)  # accepted means it fires


@settings(max_examples=300, deadline=None)
@given(
    name=st.one_of(
        st.text(max_size=80),
        st.sampled_from(["UTC", "Europe/Berlin", "../x", "Etc/GMT+5", "utc", "EST5EDT"]),
    )
)
def test_any_time_zone_text_is_either_a_zone_or_a_timezone_error(name):
    try:
        get_zone(name)
    except ScheduleError as exc:
        assert exc.field == "timezone"


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.one_of(
        st.text(max_size=250),
        st.sampled_from(["celery.chord_unlock", "celery.backend_cleanup", "tests.add"]),
    )
)
def test_any_task_name_is_either_a_registered_task_or_a_validation_error(name):
    try:
        clean_task_name(name)
    except ValidationError as exc:
        assert exc.messages
    else:
        assert name == "tests.add"


@settings(max_examples=300, deadline=None)
@given(value=JSONISH)
def test_any_json_for_args_and_kwargs_is_accepted_only_in_the_right_shape(value):
    for check, shape in ((clean_args, list), (clean_kwargs, dict)):
        try:
            check(value)
        except ValidationError as exc:
            assert exc.messages
        else:
            assert isinstance(value, shape)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("catchup_policy", "sometimes"),
        ("overlap_policy", "never"),
        ("on_uncertain", "sometimes"),
        ("catchup_window", timedelta(days=-1)),
        ("catchup_window", timedelta(days=10**6)),  # before the year 1 (was: OverflowError)
        ("max_retries", 1000),
        ("retry_backoff", -5.0),
        ("priority", 1000),
        ("expires", 0),
        ("time_limit", 0),
        ("name", ""),
        ("name", "x" * 300),
        ("queue", "spaces are bad"),
    ],
)
def test_policy_and_option_values_out_of_range_are_refused_on_their_field(field, value):
    job = JobDefinition(name="bad", cron="* * * * *", timezone="UTC", task="tests.add")
    setattr(job, field, value)
    with pytest.raises(ValidationError) as caught:
        job.full_clean()
    assert field in caught.value.message_dict


# -- bad rows that reached the table anyway ------------------------------------------------------


BAD_ROWS = [
    ("cron", "'every tuesday'"),
    ("timezone", "'Mars/Base'"),
    ("catchup_policy", "'bogus'"),
    ("overlap_policy", "'bogus'"),
    ("catchup_window", None),  # set below: zero
    ("catchup_window_huge", None),  # set below: a million days
    ("args", "'{\"a\": 1}'"),
    ("kwargs", "'[1, 2]'"),
]


@pytest.mark.django_db(transaction=True)
def test_bad_rows_are_parked_and_reported_once_while_the_good_job_keeps_running(settings, caplog):
    from django_cluster_cron.scheduler import build_scheduler

    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}"}
    now = datetime.now(UTC)
    table = JobDefinition._meta.db_table
    good = JobDefinition.objects.create(
        name="good", cron="* * * * * *", timezone="UTC", task="tests.add"
    )
    bad_ids = []
    for column, value in BAD_ROWS:
        job = JobDefinition.objects.create(
            name=f"bad-{column}", cron="* * * * * *", timezone="UTC", task="tests.add"
        )
        bad_ids.append(job.pk)
        with connection.cursor() as cursor:
            if column.startswith("catchup_window"):
                window = timedelta(days=10**6) if column.endswith("huge") else timedelta(0)
                JobDefinition.objects.filter(pk=job.pk).update(catchup_window=window)
            else:
                cursor.execute(f"UPDATE {table} SET {column} = {value} WHERE id = %s", [job.pk])
    JobDefinition.all_objects.update(
        last_scheduled_at=now - timedelta(seconds=3), next_run_at=now - timedelta(seconds=2)
    )
    scheduler = build_scheduler(node_id="bad-input", sleeper=NoWait(), stop=threading.Event())
    try:
        with caplog.at_level(logging.ERROR, logger="django_cluster_cron.scheduler"):
            scheduler.step()
            scheduler.step()
    finally:
        scheduler.shutdown()
    assert JobRun.objects.filter(job=good).exists()
    assert not JobRun.objects.filter(job_id__in=bad_ids).exists()
    assert set(
        JobDefinition.all_objects.filter(pk__in=bad_ids).values_list("next_run_at", flat=True)
    ) == {None}
    for job_id in bad_ids:
        assert caplog.text.count(f"job.invalid job={job_id} ") == 1


@pytest.mark.django_db
def test_a_worker_fails_a_run_of_a_row_with_bad_args_with_a_clear_error():
    job = _job("bad-args")
    JobDefinition.objects.filter(pk=job.pk).update(args={"x": 1})
    run = _queued_run(job)
    execute_run.apply(args=(run.pk, 1), task_id=run.task_id)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "invalid job definition: args must be a JSON list" in run.error


def _job(name):
    return JobDefinition.objects.create(
        name=name, cron="* * * * *", timezone="UTC", task="tests.add"
    )


def _queued_run(job):
    slot = datetime.now(UTC).replace(microsecond=0)
    return JobRun.objects.create(
        job=job,
        scheduled_for=slot,
        task_id=job.task_id_for(slot),
        trigger=RunTrigger.MANUAL,
        status=RunStatus.QUEUED,
    )


# -- the network: malformed or forged messages, junk in Redis ------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args",
    [
        (),
        ("1",),
        (None, None),
        (1.5, 1),
        (-1, 1),
        (True, 1),
        (2**70, 1),
        (1, "1"),
        (1, 0),
        (1, 1, "extra"),
    ],
)
def test_malformed_run_messages_are_rejected_with_a_log_line(args, caplog):
    job = _job("target")
    run = _queued_run(job)
    with caplog.at_level(logging.INFO, logger="django_cluster_cron.worker"):
        result = execute_run.apply(args=args, task_id=run.task_id)
    assert result.successful(), result.traceback
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert "run.rejected_message" in caplog.text or "run.duplicate_delivery" in caplog.text


@pytest.mark.django_db
def test_a_forged_message_naming_another_jobs_run_does_nothing():
    mine = _job("mine")
    other = _job("other")
    run = _queued_run(mine)
    execute_run.apply(args=(run.pk, 1), task_id=other.task_id_for(run.scheduled_for))
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("junk", ["string-without-ttl", "hash", "list", "huge"])
def test_junk_in_the_lease_key_does_not_stop_the_cluster_from_electing_a_leader(settings, junk):
    from django_redis import get_redis_connection

    from django_cluster_cron.scheduler import build_scheduler

    prefix = f"t{uuid.uuid4().hex[:8]}"
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": prefix}
    client = get_redis_connection("default")
    key = f"{prefix}:leader"
    if junk == "string-without-ttl":
        client.set(key, "someone:forever")
    elif junk == "hash":
        client.hset(key, mapping={"a": "b"})
        client.pexpire(key, 300)
    elif junk == "list":
        client.rpush(key, "x")
        client.pexpire(key, 300)
    else:
        client.set(key, "x" * 1_000_000)
    client.set(f"{prefix}:node:junk", "{not json")
    client.hset(f"{prefix}:lock:junk", mapping={"a": "b"})
    scheduler = build_scheduler(node_id="after-junk", sleeper=NoWait(), stop=threading.Event())
    try:
        for _ in range(20):
            scheduler.step()
            if scheduler.is_leader:
                break
            threading.Event().wait(0.05)
        assert scheduler.is_leader
        from django_cluster_cron.ops.status import cluster_status

        status = cluster_status()
        assert status.redis_error == ""
        assert status.leader_node == "after-junk"
    finally:
        scheduler.shutdown()


def test_junk_on_the_change_channel_only_wakes_the_scheduler(settings):
    from django_cluster_cron.coordination.changes import RedisChanges
    from django_cluster_cron.leases.redis import RedisBackend

    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}"}
    place = RedisBackend()
    changes = RedisChanges(place)
    listener = changes.sleeper(poll_interval=60)
    stop = threading.Event()
    try:
        listener.wait(0.1, stop)
        place.client.publish(changes.channel(), b"\xff\x00" + json.dumps({"x": 1}).encode())
        assert listener.wait(5, stop) is True
        changes.publish("x" * 100_000)
        assert listener.wait(5, stop) is True
    finally:
        listener.close()


# -- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["run_scheduler", "--lease-ttl", "-5"],
            "--lease-ttl: must be more than 0 seconds, got -5",
        ),
        (["run_scheduler", "--lease-ttl", "0"], "--lease-ttl: must be more than 0 seconds, got 0"),
        (["run_scheduler", "--poll-interval", "soon"], "'soon' is not a number of seconds"),
        (["run_scheduler", "--lease-ttl", "nan"], "--lease-ttl: must be more than 0 seconds"),
        (["run_scheduler", "--health-port", "70000"], "a port is 0 (pick a free one) to 65535"),
        (["run_scheduler", "--metrics-port", "http"], "'http' is not a port number"),
        (["prune_runs", "--days", "-1"], "--days: must be 0 or more, got -1"),
        (["prune_runs", "--batch-size", "0"], "--batch-size: must be 1 or more, got 0"),
        (["prune_runs", "--history-days", "a week"], "'a week' is not a whole number"),
    ],
)
def test_bad_command_options_are_refused_in_our_words(argv, words):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as refused:
        call_command(*argv)
    message = str(refused.value)
    assert words in message
    assert "invalid" not in message  # argparse's "invalid _positive value" named our internals


@pytest.mark.parametrize(
    "command", ["run_scheduler", "prune_runs", "sync_jobs", "cluster_health", "import_celery_beat"]
)
def test_every_command_says_its_version_and_each_options_default(command, capsys):
    from django.core.management import get_commands, load_command_class

    from django_cluster_cron import __version__

    parser = load_command_class(get_commands()[command], command).create_parser(
        "manage.py", command
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--version"])
    assert f"django-cluster-cron {__version__}" in capsys.readouterr().out
    for action in parser._actions:
        if action.dest in {"help", "version", "verbosity", "settings", "pythonpath"}:
            continue
        if action.option_strings and action.default not in (None, False):
            assert "default" in (action.help or ""), f"{command} {action.option_strings}"
