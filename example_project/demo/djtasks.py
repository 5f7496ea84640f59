"""The demo's tasks as Django's own tasks (``django.tasks``, or the django-tasks backport on Django
5.2), for the demo without Celery (``make demo TASKS=django``). A job names each by its import
path, ``demo.djtasks.echo``; the bodies are the Celery tasks' own (demo/tasks.py)."""

from collections.abc import Callable
from typing import Any

from django_cluster_cron.djtasks_app import frameworks

from . import tasks

# Django 6's @task, else the backport's (typed loosely: the two are different classes).
task: Callable[..., Callable[[Callable[..., Any]], object]] = frameworks()[0].task


@task()
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return tasks.echo.run(*args, **kwargs)


@task()
def sleep(seconds: float = 1.0) -> float:
    return tasks.sleep.run(seconds)


@task()
def http_get(url: str) -> dict[str, Any]:
    return tasks.http_get.run(url)


@task()
def always_fails() -> None:
    tasks.always_fails.run()


@task()
def witness(seconds: float = 0.0) -> int:
    return tasks.witness.run(seconds)


@task()
def completed(summary: dict[str, Any]) -> str:
    return tasks.completed.run(summary)
