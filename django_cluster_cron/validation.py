"""Field validation for job definitions, shared by the model's ``clean()``, the admin and the
scheduler's check of rows that reached the database some other way (raw SQL, an old row).

Every function raises ``django.core.exceptions.ValidationError`` whose message says what is
wrong, with which value, and why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timedelta

from django.core.exceptions import ImproperlyConfigured, ValidationError

from .conf import app_settings
from .core.cron import CronSchedule, validate_cron, validate_timezone
from .core.errors import ScheduleError

MAX_JSON_BYTES = 64 * 1024
MAX_SLOTS_IN_WINDOW = 10_000
_TASK_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*([.:\-][A-Za-z0-9_]+)*$")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.:\-]+$")

# What defines a job besides its name: what a person types in the admin or the API, and what code
# declares (and owns) for a job declared in code. Operators keep ``enabled``/``pause_note``.
DEFINITION_FIELDS = (
    "description",
    "cron",
    "timezone",
    "task",
    "args",
    "kwargs",
    "queue",
    "priority",
    "expires",
    "catchup_policy",
    "catchup_window",
    "overlap_policy",
    "max_retries",
    "retry_backoff",
    "retry_backoff_max",
    "on_worker_lost",
    "soft_time_limit",
    "time_limit",
    "start_at",
    "end_at",
    "max_runs",
    "jitter",
    "pause_after_failures",
)


def _raise(exc: ScheduleError) -> ValidationError:
    return ValidationError(exc.message, code=f"invalid_{exc.field}")


def clean_cron(value: str) -> None:
    try:
        validate_cron(value)
    except ScheduleError as exc:
        raise _raise(exc) from None


def clean_timezone(value: str) -> None:
    try:
        validate_timezone(value)
    except ScheduleError as exc:
        raise _raise(exc) from None


# Tasks no job may schedule, with why. The app's own ``execute_run`` is what runs a job: a job
# that scheduled it would call it without a run to execute, and nothing would run.
PRIVATE_TASK_PREFIXES = {
    "celery.": "one of Celery's internal tasks",
    "django_cluster_cron.": (
        "one of django-cluster-cron's own tasks (it executes the runs of jobs; a job cannot "
        "schedule it)"
    ),
}


def private_task_reason(name: str) -> str | None:
    """Why ``name`` may not be a job's task (Celery's or this app's own), or None."""
    for prefix, reason in PRIVATE_TASK_PREFIXES.items():
        if name.startswith(prefix):
            return f"{name!r} is {reason} and cannot be scheduled."
    return None


def clean_task_name(value: str) -> None:
    """A registered Celery task of the configured app, not Celery's or this app's own, allowed
    by the list."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("Task name is empty.", code="invalid_task")
    if len(value) > 200 or not _TASK_NAME.match(value):
        raise ValidationError(
            f"{value[:60]!r} is not a Celery task name (expected a dotted name such as "
            "'billing.tasks.send_invoices').",
            code="invalid_task",
        )
    private = private_task_reason(value)
    if private:
        raise ValidationError(private, code="private_task")
    if not app_settings.task_allowed(value):
        raise ValidationError(
            f"Task {value!r} is not in CLUSTER_CRON['TASK_ALLOWLIST'].", code="task_not_allowed"
        )
    from .celery_app import registered_task_names

    try:
        known = registered_task_names()
    except ImproperlyConfigured as exc:
        raise ValidationError(f"Cannot check the task: {exc}", code="no_celery_app") from None
    if value not in known:
        raise ValidationError(
            f"Task {value!r} is not registered in the Celery app "
            f"({len(known)} tasks are; check the name and that its module is imported).",
            code="unknown_task",
        )


def _json_size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


def clean_args(value: object) -> None:
    if not isinstance(value, list):
        raise ValidationError(
            f'Arguments must be a JSON list such as [1, "a"], not a JSON {_json_type(value)}.',
            code="invalid_args",
        )
    _check_size("Arguments", value)


def clean_kwargs(value: object) -> None:
    if not isinstance(value, Mapping):
        raise ValidationError(
            'Keyword arguments must be a JSON object such as {"key": 1}, not a JSON '
            f"{_json_type(value)}.",
            code="invalid_kwargs",
        )
    for key in value:
        if not isinstance(key, str) or not key.isidentifier():
            raise ValidationError(
                f"Keyword argument name {key!r} is not a valid Python identifier.",
                code="invalid_kwargs",
            )
    _check_size("Keyword arguments", value)


def _check_size(what: str, value: object) -> None:
    size = _json_size(value)
    if size > MAX_JSON_BYTES:
        raise ValidationError(
            f"{what} are {size:,} bytes as JSON; the limit is {MAX_JSON_BYTES:,} bytes. "
            "Pass an id and load large data inside the task.",
            code="too_large",
        )


def _json_type(value: object) -> str:
    names = {str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}
    if isinstance(value, Mapping):
        return "object"
    return names.get(type(value), type(value).__name__)


def clean_queue(value: str) -> None:
    if value and not _QUEUE_NAME.match(value):
        raise ValidationError(
            f"Queue name {value!r} may only contain letters, digits and . _ : -",
            code="invalid_queue",
        )


def clean_catchup_window(schedule: CronSchedule | None, window: timedelta, now: datetime) -> None:
    """The window must be positive and hold a bounded number of this schedule's slots."""
    if window <= timedelta(0):
        raise ValidationError("The catch-up window must be longer than zero.", code="invalid")
    if schedule is None:
        return
    for count, slot in enumerate(schedule.iter_after(now - window), start=1):
        if slot > now:
            return
        if count > MAX_SLOTS_IN_WINDOW:
            raise ValidationError(
                f"A window of {window} holds more than {MAX_SLOTS_IN_WINDOW:,} slots of this "
                "schedule; shorten it so a catch-up stays bounded.",
                code="window_too_large",
            )
