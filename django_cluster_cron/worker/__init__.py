"""The worker side: one run taken, carried out and recorded, whatever system delivered it.

:mod:`.run` is the neutral run (take → carry out → record → end); :mod:`.record` chooses the
ledger transition for how it ended; :mod:`.celery` and :mod:`.djtasks` hold what is each
execution system's own. Celery discovers the task itself in ``django_cluster_cron.tasks``.
Inside a job's task, :func:`current_run` gives the :class:`~django_cluster_cron.models.JobRun`
being executed.
"""

from .current import current_run

__all__ = ["current_run"]
