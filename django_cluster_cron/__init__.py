"""django-cluster-cron: cron schedules in the database, dispatched to Celery once per slot.

Importing this package must stay free of Django imports: ``django_cluster_cron.schedule``
is used without Django settings (docs, scripts, the pure core's tests).
"""

__version__ = "0.2.0"
