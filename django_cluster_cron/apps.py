from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class ClusterCronConfig(AppConfig):
    name = "django_cluster_cron"
    label = "django_cluster_cron"
    verbose_name = "Cluster cron"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        self._register_checks()
        from django_cluster_cron.ops import logtext

        logtext.install()  # one event, one line: newlines in logged names and messages escaped
        from django_cluster_cron.coordination import job_changed
        from django_cluster_cron.models import JobDefinition

        post_save.connect(job_changed, sender=JobDefinition, dispatch_uid="cluster_cron_job_saved")
        post_delete.connect(
            job_changed, sender=JobDefinition, dispatch_uid="cluster_cron_job_deleted"
        )
        from django.db.models.signals import post_migrate

        post_migrate.connect(_sync_after_migrate, sender=self, dispatch_uid="cluster_cron_sync")
        from django_cluster_cron import signals
        from django_cluster_cron.ops import metrics, monitors

        signals.job_resumed.connect(
            metrics.count_paused_slots, dispatch_uid="cluster_cron_paused_slots"
        )
        monitors.install()  # CLUSTER_CRON["MONITORS"]: nothing unless sinks are configured

    @staticmethod
    def _register_checks() -> None:
        """The system checks (checks.py), each under its tag."""
        from django.core.checks import Tags, register

        from django_cluster_cron import checks

        register(checks.check_settings, Tags.compatibility)
        # Not tagged "database": it reads settings, not the database, and Django 6.1 runs
        # database-tagged checks only when `check --database` names one.
        register(checks.check_network_timeouts, Tags.compatibility)
        register(checks.check_task_allowlist, Tags.security)
        register(checks.check_serializers, Tags.security)
        # W010 asks the database: only for the databases the command names.
        register(checks.check_pooler, Tags.database)


def _sync_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """After ``migrate``: the release step, run once per deploy with the new code, is where the
    jobs declared in code reach the database (``SYNC_JOBS_ON_MIGRATE``)."""
    from django_cluster_cron.conf import app_settings
    from django_cluster_cron.declared.sync import sync

    if not app_settings.SYNC_JOBS_ON_MIGRATE or using != "default":
        return
    # An invalid declaration is left out (and logged as declared.invalid); the others sync.
    result = sync(by="migrate")
    if kwargs.get("verbosity", 1) and (result.applied or result.skipped):
        for change in result.changes:
            if change.action != "unchanged":
                print(f"  cluster-cron: {change.line()}")
