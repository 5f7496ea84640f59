"""Suite-wide harness: a Redis server for every run, and fixtures for Redis and subprocesses.

Start-up order, and why the Redis server is chosen here and not in settings:

1. pytest-django's ``pytest_load_initial_conftests`` hook runs first. It imports
   ``tests.settings`` (reading ``REDIS_URL`` from the environment) and calls ``django.setup()``.
   Nothing connects to Redis there: Django builds cache backends on first use of
   ``caches[alias]``, and Celery reads ``app.conf`` on first use.
2. pytest then imports this conftest, and calls ``pytest_configure`` below *before collecting*
   any test module. If ``REDIS_URL`` was unset it starts a throwaway server, writes its URL into
   the settings in place, and exports ``REDIS_URL`` so child processes (schedulers, workers)
   use the same server. It refuses to go on if a cache connection was already made.

So the settings module never starts a process (``make check`` and mypy import it too), and no
test can reach the machine's shared Redis on 6379 unless ``REDIS_URL`` says so.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest

if TYPE_CHECKING:
    import redis

REPO_ROOT = Path(__file__).resolve().parent.parent
DEVREDIS_PATH = REPO_ROOT / "scripts" / "devredis.py"

# Whatever the environment said before this harness touched it.
REDIS_URL_FROM_ENV = os.environ.get("REDIS_URL") or None


def load_devredis() -> ModuleType:
    """Import scripts/devredis.py by path (it is a script, not part of any package)."""
    if "devredis" in sys.modules:
        return sys.modules["devredis"]
    spec = importlib.util.spec_from_file_location("devredis", DEVREDIS_PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["devredis"] = module
    spec.loader.exec_module(module)
    return module


devredis = load_devredis()

_session_server: Any = None  # devredis.RedisServer when this run started its own


def _use_redis(url: str) -> None:
    """Point Django's cache and Celery's broker at ``url`` before anything has connected."""
    from django.conf import settings
    from django.core.cache import caches

    if caches.all(initialized_only=True):
        raise pytest.UsageError(
            "a Django cache connection was created before tests/conftest.py chose the Redis "
            "server; do not touch caches at import time (settings, AppConfig.ready)"
        )
    # In place: CacheHandler may already hold a reference to this very dict.
    for alias in settings.CACHES.values():
        if str(alias["BACKEND"]).startswith("django_redis."):
            alias["LOCATION"] = url
    for queue in getattr(settings, "RQ_QUEUES", {}).values():  # django-tasks-rq's, if there
        queue["URL"] = url
    if not os.environ.get("CELERY_BROKER_URL"):
        settings.CELERY_BROKER_URL = url
        celery_module = sys.modules.get("tests.testapp.celery")
        if celery_module is not None and celery_module.app.configured:
            celery_module.app.conf.broker_url = url
    os.environ["REDIS_URL"] = url


def pytest_configure(config: pytest.Config) -> None:
    global _session_server
    _load_hypothesis_profile()
    if REDIS_URL_FROM_ENV or _session_server is not None:
        return
    if config.getoption("help", False) or config.getoption("version", 0):
        return
    if config.getoption("numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER"):
        # pytest-xdist's controller runs no test: each worker starts its own server, so that
        # tests that flush, pause or fill Redis never see another worker's keys.
        return
    try:
        _session_server = devredis.RedisServer().start()
    except RuntimeError as exc:
        raise pytest.UsageError(f"cannot start a throwaway Redis for the suite: {exc}") from exc
    _use_redis(_session_server.url)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _session_server
    if _session_server is not None:
        _session_server.stop()
        _session_server = None


def pytest_report_header(config: pytest.Config) -> str:
    if _session_server is not None:
        return f"redis: throwaway {_session_server.url} (pid {_session_server.pid})"
    return f"redis: {REDIS_URL_FROM_ENV} (from REDIS_URL)"


TESTS_DIR = Path(__file__).resolve().parent
DATABASE_DIR = TESTS_DIR / "database"  # in this process, against the database, Redis, a broker
CLUSTER_DIR = TESTS_DIR / "cluster"  # real processes: schedulers, workers, servers, children


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers by directory: ``integration`` (real services) on tests/database and tests/cluster,
    and ``slow`` on tests/cluster, so that ``-m "not slow"`` leaves out every multi-process test.
    """
    for item in items:
        parents = Path(item.path).resolve().parents
        if DATABASE_DIR in parents or CLUSTER_DIR in parents:
            item.add_marker(pytest.mark.integration)
        if CLUSTER_DIR in parents:
            item.add_marker(pytest.mark.slow)


def _load_hypothesis_profile() -> None:
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # pragma: no cover - hypothesis is in the test extra
        return
    # No deadlines: a 2-core CI box running Postgres and Redis beside the suite has jitter.
    settings.register_profile("dev", deadline=None, max_examples=50)
    settings.register_profile(
        "ci",
        deadline=None,
        max_examples=200,
        derandomize=True,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    default = "ci" if os.environ.get("CI") else "dev"
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", default))


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _close_lease_connection() -> Iterator[None]:
    """The database lease backend keeps a connection of its own per thread; close this thread's
    after each test, so none outlives the test database."""
    yield
    from django_cluster_cron.leases.database import close_private_connection

    close_private_connection()


@pytest.fixture(autouse=True)
def _fresh_health_reports() -> None:
    """The health view answers from its last report for a moment: never from another test's."""
    from django_cluster_cron.ops.views import forget_reports

    forget_reports()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the Redis server the suite uses (throwaway, or ``REDIS_URL``)."""
    from django.conf import settings

    return str(settings.CACHES["default"]["LOCATION"])


@pytest.fixture(scope="session")
def session_redis_server() -> Any:
    """The suite's own ``devredis.RedisServer``, or None when ``REDIS_URL`` was given.

    Shared by the whole run: never stop or pause it; use ``throwaway_redis`` for that.
    """
    return _session_server


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A redis-py client for ``redis_url``; its database is flushed before and after the test."""
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    client.flushdb()
    try:
        yield client
    finally:
        client.flushdb()
        client.close()


@pytest.fixture(scope="session")
def rabbitmq_url() -> Iterator[str]:
    """An AMQP URL on a vhost of this run's own: ``RABBITMQ_URL`` if set, else a vhost made
    with ``rabbitmqctl`` on the local RabbitMQ (deleted at the end). Skips when neither exists.
    """
    import shutil
    import socket
    import subprocess
    import uuid

    given = os.environ.get("RABBITMQ_URL")
    if given:
        yield given
        return
    ctl = shutil.which("rabbitmqctl")
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except OSError:
        ctl = None
    if ctl is None:
        reason = "no RabbitMQ: set RABBITMQ_URL, or run a local RabbitMQ with rabbitmqctl"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run the RabbitMQ tests, not skip them)")
        pytest.skip(reason)
    vhost = f"dcc-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    def rabbitmqctl(*args: str) -> None:
        subprocess.run([ctl, *args], check=True, capture_output=True, timeout=60)

    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"amqp://guest:guest@127.0.0.1:5672/{quote(vhost, safe='')}"
    finally:
        rabbitmqctl("delete_vhost", vhost)


@pytest.fixture
def throwaway_redis() -> Iterator[Any]:
    """A fresh ``devredis.RedisServer`` for one test, free to stop, restart, pause and resume."""
    server = devredis.RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def django_subprocess_env(transactional_db: None, redis_url: str) -> dict[str, str]:
    """Environment for a child process (``manage.py``-style command, Celery worker) that must
    see the test database and the suite's Redis: DJANGO_SETTINGS_MODULE, DATABASE_URL naming
    the *test* database, REDIS_URL, and PYTHONPATH with the repository root.

    Uses ``transactional_db``: a child only sees committed rows.
    """
    from django.db import connection

    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    env["DATABASE_URL"] = database_url(connection.settings_dict)
    env["REDIS_URL"] = redis_url
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.pop("TEST_DB_NAME", None)
    return env


def database_url(settings_dict: dict[str, Any]) -> str:
    """A dj-database-url URL for a Django DATABASES entry (as switched to the test DB)."""
    engine = settings_dict["ENGINE"]
    name = str(settings_dict["NAME"])
    if engine == "django.db.backends.sqlite3":
        return "sqlite:///" + name
    scheme = {
        "django.db.backends.postgresql": "postgres",
        "django.db.backends.mysql": "mysql",
    }.get(engine)
    if scheme is None:
        raise NotImplementedError(f"no URL scheme for database engine {engine!r}")
    user = quote(settings_dict.get("USER") or "", safe="")
    password = quote(settings_dict.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return f"{scheme}://{auth}{host}{port}/{quote(name, safe='')}"
