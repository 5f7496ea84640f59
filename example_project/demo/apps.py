from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "demo"
    verbose_name = "Demo"

    def ready(self) -> None:
        # Register the demo tasks in every process that loads Django (web server, scheduler),
        # not only in Celery workers, so task names can be checked where a job is saved.
        from demo import tasks  # noqa: F401
