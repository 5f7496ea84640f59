from django.apps import AppConfig


class ClusterCronConfig(AppConfig):
    name = "django_cluster_cron"
    label = "django_cluster_cron"
    verbose_name = "Cluster cron"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from django_cluster_cron import checks  # noqa: F401  (registers the system checks)
        from django_cluster_cron.changes import job_changed
        from django_cluster_cron.models import JobDefinition

        post_save.connect(job_changed, sender=JobDefinition, dispatch_uid="cluster_cron_job_saved")
        post_delete.connect(
            job_changed, sender=JobDefinition, dispatch_uid="cluster_cron_job_deleted"
        )
