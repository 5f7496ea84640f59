"""The scheduler: the leadership loop, the ORM store (fenced writes, the outbox), dispatch to
Celery and the change signal.

``build_scheduler`` wires a :class:`Scheduler` to the project's lease, database and Celery app
(``manage.py run_scheduler`` uses it).
"""

from .loop import Scheduler, build_scheduler, default_node_id

__all__ = ["Scheduler", "build_scheduler", "default_node_id"]
