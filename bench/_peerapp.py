"""The Celery app the peers' `celery beat` processes run (django-celery-beat, celery-redbeat).

    celery -A _peerapp beat -S redbeat.RedBeatScheduler      # cwd or PYTHONPATH: bench/

It is the test suite's app (same Django settings, same broker: ``REDIS_URL``) plus the peer's
own options as JSON in ``BENCH_CELERY_CONF``, e.g.
``{"beat_max_loop_interval": 1, "redbeat_lock_timeout": 10}``. Nothing is set that the harness
did not name, so an empty ``BENCH_CELERY_CONF`` means the peer runs with its shipped defaults.
"""

from __future__ import annotations

import json
import os

import django
from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
# DatabaseScheduler imports django_celery_beat's models at start: Django must be ready first.
django.setup()

app = Celery("bench-peer")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.redbeat_redis_url = os.environ["REDIS_URL"]
app.conf.update(json.loads(os.environ.get("BENCH_CELERY_CONF") or "{}"))
