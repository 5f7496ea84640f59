from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"
    verbose_name = "Test app"

    def ready(self) -> None:
        # Import the tasks here rather than waiting for Celery's autodiscovery, which only runs
        # inside a worker: the scheduler validates task names against ``app.tasks`` in any
        # process, and the names must be registered there too.
        from tests.testapp import celery, tasks  # noqa: F401
