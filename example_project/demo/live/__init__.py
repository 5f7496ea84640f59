"""The live terminal demo behind ``make demo`` (``manage.py demo_live``).

``procs`` starts and stops the cluster (Redis, a Celery worker, schedulers, the dev server);
``snapshot`` reads what the cluster is doing from the database and Redis; ``narrator`` turns
changes between snapshots into sentences; ``view`` draws them with rich; ``story`` plays the
failover story unattended (CI); ``app`` ties them together.
"""
