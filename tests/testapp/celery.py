"""The suite's Celery app (``CLUSTER_CRON["CELERY_APP"] = "tests.testapp.celery:app"``).

Start a worker for the multi-process tests (tests/cluster) with::

    DJANGO_SETTINGS_MODULE=tests.settings celery -A tests.testapp.celery:app worker
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

app = Celery("tests")
# Read lazily (first use of app.conf), so the harness can still choose the broker URL after
# this module is imported.
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
