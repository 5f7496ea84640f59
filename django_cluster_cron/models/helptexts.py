"""What the job's form says of its fields where a word for Celery alone would mislead: the help
texts of the task, its queue and priority (a job's task is a Celery task or a ``django.tasks``
task), and the catch-up window, whose field says the formats it takes when it refuses one."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models

from ..validation import WINDOW_FORMAT

TASK = (
    "A Celery task's registered name ('billing.send_invoices'), or the import path of a "
    "django.tasks task: a function decorated with @task ('billing.tasks.send_invoices')."
)
QUEUE = (
    "Where runs wait for a worker. Celery: a queue name; empty uses the project's routing. "
    "django.tasks: one of the task's backend's QUEUES; empty uses the task's own queue."
)
PRIORITY = (
    "Empty: the task's own. Celery: the message priority, 0-255 (RabbitMQ 0-255, Redis 0-9). "
    "django.tasks: -100 to 100, higher first, on a backend that supports priorities."
)
CATCHUP_WINDOW = "How far back missed slots are considered after an outage."


class WindowField(models.DurationField):  # type: ignore[type-arg]
    """A duration whose refusal of a value says the formats it takes (Django's form field says
    only "Enter a valid duration.")."""

    default_error_messages: ClassVar[dict[str, Any]] = {
        "invalid": "“%(value)s” is not a duration: give it " + WINDOW_FORMAT + ".",
    }

    def formfield(self, **kwargs: Any) -> Any:
        messages = {"invalid": f"Enter a duration {WINDOW_FORMAT}."}
        return super().formfield(**{"error_messages": messages, **kwargs})
