from django.apps import AppConfig


class ClusterCronConfig(AppConfig):
    name = "django_cluster_cron"
    label = "django_cluster_cron"
    verbose_name = "Cluster cron"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_cluster_cron import checks  # noqa: F401  (registers the system checks)
