"""The worker side: claiming a run, executing its job's task and recording what happened.

Celery discovers the task itself in ``django_cluster_cron.tasks``. Inside a job's task,
:func:`current_run` gives the :class:`~django_cluster_cron.models.JobRun` being executed.
"""

from .execute import current_run

__all__ = ["current_run"]
