"""The suite's Celery app (``CLUSTER_CRON["CELERY_APP"] = "tests.testapp.celery:app"``).

Start a worker for the multi-process tests (tests/cluster) with::

    DJANGO_SETTINGS_MODULE=tests.settings celery -A tests.testapp.celery:app worker
"""

import logging
import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

app = Celery("tests")
# Read lazily (first use of app.conf), so the harness can still choose the broker URL after
# this module is imported.
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.after_setup_logger.connect(weak=False)
def _each_line_once(**info):
    """The suite's settings give this app's logger a handler of its own; in a worker, Celery
    also gives the root logger one. Without this, each line of the app's would be written
    twice, and a test counting lines would count every event double."""
    logging.getLogger("django_cluster_cron").propagate = False


if os.environ.get("TEST_LOG_TASK_SIGNALS"):
    # What a project's own signal receivers see in the worker (tests/cluster/
    # test_what_celery_sees.py reads these lines from the worker's log).
    _seen = logging.getLogger("tests.task_signals")

    @signals.task_prerun.connect(weak=False)
    def _prerun(sender=None, task_id=None, args=None, **info):
        _seen.warning("seen task_prerun task=%s id=%s args=%r", sender.name, task_id, list(args))

    @signals.task_failure.connect(weak=False)
    def _failure(sender=None, task_id=None, exception=None, **info):
        _seen.warning(
            "seen task_failure task=%s id=%s exception=%r", sender.name, task_id, exception
        )


if os.environ.get("TEST_LOG_DB_CONNECTIONS"):
    # Every database connection the worker's processes open (tests/cluster/
    # test_worker_processes.py counts these lines).
    import threading

    from django.db.backends.signals import connection_created

    _connections = logging.getLogger("tests.db_connections")

    def _opened(sender=None, connection=None, **info):
        _connections.warning(
            "seen db_connection alias=%s thread=%s",
            connection.alias,
            threading.current_thread().name,
        )

    connection_created.connect(_opened, weak=False)
