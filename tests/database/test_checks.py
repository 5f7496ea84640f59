"""System checks report bad settings with stable ids; the settings object has typed defaults."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_cluster_cron.checks import check_settings
from django_cluster_cron.conf import app_settings


def ids(settings_dict=None):
    return sorted(message.id for message in check_settings())


@pytest.fixture
def cron_settings(settings):
    def apply(**values):
        settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, **values}

    return apply


def test_the_test_settings_pass_every_check():
    assert check_settings() == []


def test_the_app_config_registers_each_check_under_its_tag():
    from django.core.checks import Tags
    from django.core.checks.registry import registry

    from django_cluster_cron import checks

    expected = {
        checks.check_settings: (Tags.compatibility,),
        checks.check_network_timeouts: (Tags.compatibility,),
        checks.check_task_allowlist: (Tags.security,),
        checks.check_serializers: (Tags.security,),
        checks.check_pooler: (Tags.database,),
    }
    registered: set[object] = set(registry.registered_checks)
    for check, tags in expected.items():
        assert check in registered, check.__name__
        assert tuple(check.tags) == tags, check.__name__  # type: ignore[attr-defined]


def test_defaults_are_typed_and_documented_values():
    assert app_settings.LEASE_TTL == 10.0
    assert app_settings.RENEW_INTERVAL == pytest.approx(10.0 / 3)  # noqa: SIM300
    assert app_settings.CATCHUP_WINDOW == timedelta(hours=1)  # noqa: SIM300
    assert app_settings.CATCHUP_POLICY == "latest"
    assert app_settings.OVERLAP_POLICY == "allow"
    assert app_settings.TASK_ALLOWLIST is None


def test_settings_are_read_at_access_time(cron_settings):
    cron_settings(LEASE_TTL=30, CATCHUP_WINDOW=timedelta(minutes=5))
    assert app_settings.LEASE_TTL == 30.0
    assert app_settings.RENEW_INTERVAL == 10.0
    assert app_settings.CATCHUP_WINDOW == timedelta(minutes=5)  # noqa: SIM300


def test_a_value_changed_in_place_is_read_anew(settings):
    # A setting is parsed once and reused while the project's value is unchanged: a value
    # changed in place (the dict's entry, or a list inside it) is still seen at the next read.
    settings.CLUSTER_CRON = {"LEASE_TTL": 10, "REDACT_KEYS": ["pass"]}
    assert app_settings.LEASE_TTL == 10.0
    assert app_settings.REDACT_KEYS == ("pass",)
    settings.CLUSTER_CRON["LEASE_TTL"] = 20
    settings.CLUSTER_CRON["REDACT_KEYS"].append("token")
    assert app_settings.LEASE_TTL == 20.0
    keys: tuple[str, ...] = app_settings.REDACT_KEYS
    assert keys == ("pass", "token")
    settings.CLUSTER_CRON["LEASE_TTL"] = "soon"
    with pytest.raises(ImproperlyConfigured, match="LEASE_TTL"):
        app_settings.LEASE_TTL  # noqa: B018


def test_a_read_that_gives_a_dict_gives_each_caller_its_own(settings):
    settings.CLUSTER_CRON = {"JOBS": {"a": {"task": "tests.add", "schedule": "* * * * *"}}}
    first = app_settings.JOBS
    first.pop("a")
    assert "a" in app_settings.JOBS


def test_a_non_dict_setting_is_e001(settings):
    settings.CLUSTER_CRON = ["LEASE_TTL", 5]
    assert ids() == ["cluster_cron.E001"]


def test_an_unknown_key_is_w001_with_a_suggestion(cron_settings):
    cron_settings(LEASE_TLL=5)
    [message] = check_settings()
    assert message.id == "cluster_cron.W001"
    assert "LEASE_TTL" in (message.hint or "")


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("LEASE_TTL", 0, "positive number of seconds"),
        ("LEASE_TTL", "10", "positive number of seconds"),
        ("BATCH_SIZE", 0, "whole number >= 1"),
        ("CATCHUP_POLICY", "sometimes", "one of 'all', 'latest', 'none'"),
        ("OVERLAP_POLICY", "never", "one of 'allow', 'skip', 'buffer_one'"),
        ("TASK_ALLOWLIST", "billing.*", "list of task name patterns"),
        ("REDIS_ALIAS", "", "non-empty string"),
    ],
)
def test_a_bad_value_is_e002_naming_setting_value_and_expectation(cron_settings, key, value, words):
    cron_settings(**{key: value})
    messages = [m for m in check_settings() if m.id == "cluster_cron.E002"]
    assert len(messages) == 1
    assert f"['{key}'] is {value!r}" in messages[0].msg
    assert words in messages[0].msg
    with pytest.raises(ImproperlyConfigured, match=key):
        getattr(app_settings, key)


def test_a_renew_interval_too_close_to_the_ttl_is_e003(cron_settings):
    cron_settings(LEASE_TTL=10, RENEW_INTERVAL=6)
    assert ids() == ["cluster_cron.E003"]


def test_a_missing_cache_alias_is_e004(cron_settings):
    cron_settings(REDIS_ALIAS="locks")
    assert ids() == ["cluster_cron.E004"]


def test_the_database_lease_needs_no_cache_at_all(settings):
    settings.CACHES = {}
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "database"}
    settings.CLUSTER_CRON.pop("REDIS_ALIAS", None)
    assert check_settings() == []


def test_without_a_django_redis_cache_the_lease_defaults_to_the_database(settings):
    from django_cluster_cron.leases import backend_name

    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.CLUSTER_CRON = {
        k: v for k, v in settings.CLUSTER_CRON.items() if k not in ("REDIS_ALIAS", "LEASE_BACKEND")
    }
    assert backend_name() == "database"
    assert check_settings() == []
    # Naming a Redis alias says "I mean Redis": then a missing django-redis cache is an error.
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "REDIS_ALIAS": "default"}
    assert backend_name() == "redis"
    assert [m.id for m in check_settings()] == ["cluster_cron.E005"]


def test_an_unknown_lease_backend_is_e002_and_memory_is_w003(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "zookeeper"}
    [message] = check_settings()
    assert message.id == "cluster_cron.E002"
    assert "'redis', 'database', 'memory'" in message.msg
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "memory"}
    [message] = check_settings()
    assert message.id == "cluster_cron.W003"


def test_a_cache_that_is_not_django_redis_is_e005(settings):
    settings.CACHES = {
        **settings.CACHES,
        "builtin": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1",
        },
    }
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "REDIS_ALIAS": "builtin"}
    [message] = check_settings()
    assert message.id == "cluster_cron.E005"
    assert "not a django-redis cache" in message.msg


@pytest.mark.parametrize(
    ("path", "words"),
    [("nowhere.celery:app", "cannot be imported"), ("tests.testapp.tasks:add", "not a Celery app")],
)
def test_a_celery_app_that_cannot_be_found_is_e006(cron_settings, path, words):
    cron_settings(CELERY_APP=path)
    [message] = check_settings()
    assert message.id == "cluster_cron.E006"
    assert words in message.msg


def test_use_tz_false_is_e007(settings):
    settings.USE_TZ = False
    assert ids() == ["cluster_cron.E007"]


@pytest.mark.parametrize("tasks", [False, True])
def test_no_configured_celery_app_is_w002_unless_the_project_uses_django_tasks(settings, tasks):
    from celery import Celery, current_app

    previous = current_app._get_current_object()  # type: ignore[attr-defined]
    settings.CLUSTER_CRON = {k: v for k, v in settings.CLUSTER_CRON.items() if k != "CELERY_APP"}
    if tasks:
        settings.TASKS = {"default": {"BACKEND": "django_tasks_db.backend.DatabaseBackend"}}
    else:
        del settings.TASKS
    Celery(set_as_current=True)  # what celery.current_app is when no project app was imported
    try:
        found = check_settings()
    finally:
        previous.set_current()
    assert [message.id for message in found] == ([] if tasks else ["cluster_cron.W002"])
    assert check_settings() == []  # the project's app is current again


@pytest.mark.django_db  # `check` runs the model checks, which may ask the database its features
def test_a_bad_declared_job_is_a_warning_so_every_command_still_runs(cron_settings):
    """An error would stop run_scheduler, migrate and sync_jobs at their checks: one typo in
    one declaration would stop every job. The sync leaves that one out instead."""
    from io import StringIO

    from django.core.checks import ERROR
    from django.core.management import call_command

    good = {"task": "tests.add", "schedule": "0 3 * * *", "args": [1, 2]}
    cron_settings(JOBS={"good": good, "typo": {**good, "schedule": "0 3 * * 8"}})
    [message] = check_settings()
    assert message.id == "cluster_cron.W005"
    assert message.level < ERROR
    assert message.msg.startswith("Declared job 'typo' (settings CLUSTER_CRON['JOBS']['typo']):")
    assert "schedule: day-of-week field: '8'" in message.msg
    assert "leaves this job out" in (message.hint or "")
    err = StringIO()
    call_command("check", stdout=StringIO(), stderr=err)  # no SystemCheckError
    assert "cluster_cron.W005" in err.getvalue()


@pytest.mark.parametrize(
    ("jobs", "words"),
    [
        (["a list"], "must be a dict of job name -> job fields, not list"),
        (
            {"typo": {"task": "tests.add", "shedule": "0 3 * * *"}},
            "'shedule' cannot be declared: not a job field (did you mean 'schedule'?)",
        ),
        ({5: {"task": "tests.add", "schedule": "0 3 * * *"}}, "5 is not a job name"),
    ],
)
def test_jobs_that_cannot_be_read_are_w004_not_a_setting_error(cron_settings, jobs, words):
    cron_settings(JOBS=jobs)
    [message] = check_settings()
    assert message.id == "cluster_cron.W004"
    assert words in message.msg


def test_a_database_without_bounded_waits_gets_w006_naming_what_to_add(settings):
    from django_cluster_cron.checks import check_network_timeouts

    entry = {"ENGINE": "django.db.backends.postgresql", "NAME": "x", "OPTIONS": {}}
    settings.DATABASES = {**settings.DATABASES, "other": entry}
    found = [m for m in check_network_timeouts() if m.id == "cluster_cron.W006"]
    ours = [m for m in found if "DATABASES['other']" in m.msg]
    assert len(ours) == 1
    assert "tcp_user_timeout" in ours[0].msg
    assert "'keepalives_idle': 5" in str(ours[0].hint)


def test_a_database_with_bounded_waits_and_sqlite_get_no_w006(settings):
    from django_cluster_cron.checks import check_network_timeouts

    bounded = {
        "ENGINE": "django.db.backends.mysql",
        "NAME": "x",
        "OPTIONS": {"connect_timeout": 5, "read_timeout": 600, "write_timeout": 600},
    }
    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    settings.DATABASES = {"default": sqlite, "reports": bounded}
    assert "cluster_cron.W006" not in [m.id for m in check_network_timeouts()]


def test_the_redis_lease_waiting_without_bound_gets_w007(settings, monkeypatch):
    import django_redis
    import redis

    from django_cluster_cron.checks import check_network_timeouts

    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "redis"}
    alias = settings.CLUSTER_CRON.get("REDIS_ALIAS", "default")
    settings.CACHES = {**settings.CACHES, alias: {**settings.CACHES[alias], "OPTIONS": {}}}
    # A plain pool: the lease copies it with timeouts (or redis-py 8 has them by default).
    assert "cluster_cron.W007" not in [m.id for m in check_network_timeouts()]

    class SentinelLikePool(redis.ConnectionPool):
        """A pool the lease cannot copy, without a socket timeout (redis-py < 8 defaults)."""

    unbounded = redis.Redis(
        connection_pool=SentinelLikePool(host="127.0.0.1", port=1, socket_timeout=None)
    )
    monkeypatch.setattr(django_redis, "get_redis_connection", lambda alias: unbounded)
    warned = [m for m in check_network_timeouts() if m.id == "cluster_cron.W007"]
    assert len(warned) == 1
    assert "SOCKET_TIMEOUT" in (warned[0].hint or "")
    # Given a timeout, the same pool is bounded: no warning.
    timed_pool = SentinelLikePool(host="127.0.0.1", port=1, socket_timeout=5)
    timed = redis.Redis(connection_pool=timed_pool)
    monkeypatch.setattr(django_redis, "get_redis_connection", lambda alias: timed)
    assert "cluster_cron.W007" not in [m.id for m in check_network_timeouts()]


UNBOUNDED = {"ENGINE": "django.db.backends.postgresql", "NAME": "x", "OPTIONS": {}}


@pytest.mark.django_db  # `check` runs the model checks, which may ask the database its features
def test_manage_py_check_shows_w006_as_any_other_warning(settings):
    """It was a deployment check: `check` said nothing while every scheduler start warned."""
    from io import StringIO

    from django.core.management import call_command

    settings.DATABASES = {**settings.DATABASES, "other": UNBOUNDED}
    err = StringIO()
    call_command("check", stdout=StringIO(), stderr=err)
    assert "(cluster_cron.W006) DATABASES['other'] sets no connect_timeout" in err.getvalue()
    settings.SILENCED_SYSTEM_CHECKS = ["cluster_cron.W006"]
    err = StringIO()
    call_command("check", stdout=StringIO(), stderr=err)
    assert "cluster_cron.W006" not in err.getvalue()


@pytest.mark.django_db
def test_run_scheduler_shows_w006_once_at_its_start_and_not_when_silenced(settings, monkeypatch):
    from io import StringIO

    from django.core.management import call_command

    from django_cluster_cron.management.commands import run_scheduler as command

    class Started(Exception):
        """Raised where the scheduler would be built: its start-up output is all there is."""

    def started(**options: object) -> None:
        raise Started

    # Not for this process: what the command changes for the scheduler it runs.
    monkeypatch.setattr(command, "bound_publish_waits", lambda: None)
    monkeypatch.setattr(command, "bound_server_waits_of_this_process", lambda: None)
    monkeypatch.setattr(command, "build_scheduler", started)
    settings.DATABASES = {**settings.DATABASES, "other": UNBOUNDED}

    def start_output() -> str:
        err = StringIO()
        with pytest.raises(Started):
            call_command("run_scheduler", "--once", skip_checks=False, stderr=err)
        return err.getvalue()

    assert start_output().count("DATABASES['other'] sets no connect_timeout") == 1
    settings.SILENCED_SYSTEM_CHECKS = ["cluster_cron.W006"]
    assert "cluster_cron.W006" not in start_output()


def test_the_api_without_a_task_allowlist_gets_w008(settings):
    from django_cluster_cron.checks import check_task_allowlist

    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "TASK_ALLOWLIST": None}
    warned = check_task_allowlist()  # tests/urls.py mounts the API
    assert [m.id for m in warned] == ["cluster_cron.W008"]
    assert "TASK_ALLOWLIST" in (warned[0].hint or "")
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "TASK_ALLOWLIST": ["tests.*"]}
    assert check_task_allowlist() == []
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "TASK_ALLOWLIST": None}
    settings.ROOT_URLCONF = "django_cluster_cron.urls"  # the health view only: no API
    assert check_task_allowlist() == []


def test_a_celery_app_that_accepts_pickle_gets_w009():
    from django_cluster_cron.celery_app import get_celery_app
    from django_cluster_cron.checks import check_serializers

    conf = get_celery_app().conf
    assert check_serializers() == []  # the test project's app speaks JSON only
    before = conf.accept_content
    conf.accept_content = ["json", "pickle"]
    try:
        warned = check_serializers()
    finally:
        conf.accept_content = before
    assert [m.id for m in warned] == ["cluster_cron.W009"]
    assert "accept_content: pickle" in warned[0].msg
    assert check_serializers() == []
