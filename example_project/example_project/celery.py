"""The project's Celery app; `CLUSTER_CRON["CELERY_APP"]` points here."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

app = Celery("example_project")
# Every `CELERY_*` Django setting configures Celery (`CELERY_BROKER_URL` -> `broker_url`).
app.config_from_object("django.conf:settings", namespace="CELERY")
# Finds `tasks.py` in every installed app (here `demo.tasks`).
app.autodiscover_tasks()
