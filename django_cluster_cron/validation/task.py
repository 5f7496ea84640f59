"""What a job's task is, and whether the job fits it: the task name names a Celery task of the
project's app or a ``django.tasks`` task (and when it names neither, what it does name); the
arguments fit the task's signature; the queue and priority are ones the task's execution system
takes; a time limit is set only where something enforces it."""

from __future__ import annotations

import inspect
import re
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError

from ..celery_app import (
    configured,
    get_celery_app,
    pool_name,
    private_task_reason,
    registered_name,
    registered_task_names,
    task_signature,
    terminate_refusal,
)
from ..conf import app_settings
from ..djtasks_app import Refused, frameworks, imported, resolve_task, target
from ..djtasks_app import task_signature as tasks_signature

_TASK_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*([.:\-][A-Za-z0-9_]+)*$")
# Celery's message priorities: RabbitMQ's 0-255 (Redis brokers use 0-9). A django.tasks
# backend takes -100..100 (the framework's MIN_PRIORITY and MAX_PRIORITY).
CELERY_PRIORITIES = (0, 255)
TASKS_PRIORITIES = (-100, 100)
TIME_LIMIT_FIELDS = ("soft_time_limit", "time_limit")
TERMINATE_OTHER = "terminate_other"


def allowlist_reason(task: str) -> str | None:
    """Why ``TASK_ALLOWLIST`` refuses ``task``, or None (no list, or the task is on it)."""
    if app_settings.task_allowed(task):
        return None
    return f"Task {task!r} is not in CLUSTER_CRON['TASK_ALLOWLIST']."


def clean_task_name(value: str) -> None:
    """A registered Celery task of the configured app, or the import path of a ``django.tasks``
    task; not Celery's or this app's own; allowed by the list."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("Task name is empty.", code="invalid_task")
    if len(value) > 200 or not _TASK_NAME.match(value):
        raise ValidationError(
            f"{value[:60]!r} is not a task name (expected a Celery task's name or a "
            "django.tasks task's import path, such as 'billing.tasks.send_invoices').",
            code="invalid_task",
        )
    private = private_task_reason(value)
    if private:
        raise ValidationError(private, code="private_task")
    not_allowed = allowlist_reason(value)
    if not_allowed:
        raise ValidationError(not_allowed, code="task_not_allowed")
    if resolve_task(value) is not None:
        return
    try:
        app = get_celery_app()
        known = registered_task_names(app)
    except ImproperlyConfigured as exc:
        raise ValidationError(f"Cannot check the task: {exc}", code="no_celery_app") from None
    if value in known:
        return
    raise ValidationError(
        unknown_task(value, known if configured(app) else None), code="unknown_task"
    )


def unknown_task(value: str, known: list[str] | None) -> str:
    """Why ``value`` names no task of the project: where it was looked for (``known``: the
    Celery app's tasks, None when the project configures no Celery app; django.tasks, if
    installed) and, for a path that imports, what it names instead (a plain function, a Celery
    task by another name)."""
    found, why_not = imported(value) if "." in value else (None, "")
    other_name = registered_name(found)
    if other_name is not None:
        why = f"it is the path of the Celery task registered as {other_name!r}: name it so"
    elif inspect.isroutine(found):
        why = f"it is a function, not a @task (decorate it with {_decorators(known)})"
    elif found is not None:
        why = f"it names a {type(found).__name__}, not a task"
    else:
        why = why_not
    if known is None:
        if not frameworks():
            return (
                f"Task {value!r}: no Celery app is configured (CLUSTER_CRON['CELERY_APP']) and "
                "Django's tasks framework is not installed, so no task can be found."
            )
        where = f"{value!r} is not the path of a django.tasks task" + (f": {why}" if why else "")
        return f"{where}. (It is no Celery task's name either: no Celery app is configured.)"
    count = "1 task" if len(known) == 1 else f"{len(known)} tasks"
    where = (
        f"Task {value!r} is not registered in the Celery app "
        f"(it has {count}; check the name and that its module is imported)"
        + (", nor the path of a django.tasks task" if frameworks() else "")
    )
    return where + (f": {why}." if why else ".")


def _decorators(known: list[str] | None) -> str:
    """The decorators that make a function a task the project can schedule."""
    found = [f"@task (from {framework.package} import task)" for framework in frameworks()[:1]]
    if known is not None:
        found.append("Celery's @shared_task")
    return " or ".join(found)


def task_errors(job: Any) -> dict[str, ValidationError]:
    """For a job whose task name is valid: what of the job does not fit its task, by field —
    the arguments (against the task's signature, where it can be read), the queue and priority
    (a django.tasks task's backend's rules; Celery's priority range), a time limit (Celery's
    only)."""
    try:
        found = target(job.task)
    except Refused as refusal:
        return {refusal.field: ValidationError(str(refusal), code=refusal.code)}
    errors: dict[str, ValidationError] = {}
    if found is not None:
        signature = tasks_signature(found.task)
        errors.update(_backend_errors(job, found))
        errors.update(
            (field, ValidationError(NO_TIME_LIMITS, code="no_time_limits"))
            for field in TIME_LIMIT_FIELDS
            if getattr(job, field)
        )
        cannot = f"A django.tasks task cannot be terminated: {terminate_refusal('django.tasks')}."
        if job.cancel_grace is not None:
            errors["cancel_grace"] = ValidationError(
                f"{cannot} Leave it empty.", code="cannot_terminate"
            )
        if job.overlap_policy == TERMINATE_OTHER:
            errors["overlap_policy"] = ValidationError(
                f"{cannot} Use cancel_other: it asks the running run to stop.",
                code="cannot_terminate",
            )
    else:
        signature = _celery_signature(job.task)
        if job.cancel_grace is not None:
            errors.update(_pool_errors("cancel_grace", "Leave it empty"))
        if job.overlap_policy == TERMINATE_OTHER:
            errors.update(_pool_errors("overlap_policy", "Use cancel_other"))
        low, high = CELERY_PRIORITIES
        if job.priority is not None and not low <= job.priority <= high:
            errors["priority"] = ValidationError(
                "Celery message priorities are 0 and up (RabbitMQ takes 0-255, Redis 0-9), "
                f"not {job.priority}; a priority below 0 is for django.tasks tasks "
                f"({TASKS_PRIORITIES[0]} to {TASKS_PRIORITIES[1]}).",
                code="priority",
            )
    if signature is not None and isinstance(job.args, list) and isinstance(job.kwargs, dict):
        errors.update(argument_errors(job.task, signature, job.args, job.kwargs))
    return errors


def _pool_errors(field: str, instead: str) -> dict[str, ValidationError]:
    """A terminate (a cancel grace, the terminate_other policy) is refused where the project's
    Celery workers cannot terminate a task (the app's ``worker_pool``: what ``celery worker``
    runs unless ``-P`` says otherwise)."""
    try:
        pool = pool_name(get_celery_app().conf.worker_pool or "prefork")
    except ImproperlyConfigured:
        return {}
    refusal = terminate_refusal(pool)
    if refusal is None:
        return {}
    return {
        field: ValidationError(
            f"Runs cannot be terminated here: {refusal} (Celery's worker_pool setting is "
            f"{pool!r}). {instead}, or run the workers with -P prefork, eventlet or gevent "
            "and set worker_pool so.",
            code="cannot_terminate",
        )
    }


NO_TIME_LIMITS = (
    "A django.tasks task cannot be stopped at a time limit: its backends have none, so the "
    "limit would never apply. Leave it empty (time limits are Celery's)."
)


def _backend_errors(job: Any, found: Any) -> dict[str, ValidationError]:
    """What a django.tasks task's backend refuses of the job's queue and priority (or of the
    task's own, when the job leaves them empty), by field."""
    try:
        queue = job.queue or app_settings.DEFAULT_QUEUE or found.task.queue_name
        found.bind(found.task, queue=queue, priority=job.priority)
    except Refused as refusal:
        return {refusal.field: ValidationError(str(refusal), code=refusal.code)}
    return {}


def _celery_signature(name: str) -> inspect.Signature | None:
    try:
        return task_signature(get_celery_app(), name)
    except ImproperlyConfigured:
        return None


def argument_errors(
    task: str, signature: inspect.Signature, args: list[Any], kwargs: dict[str, Any]
) -> dict[str, ValidationError]:
    """Whether ``args`` and ``kwargs`` fit ``signature``, as a call would bind them: the
    problem, on the field to change (``args`` for too many of them, or for a parameter nothing
    gives that they could; ``kwargs`` for a keyword the task has not or one given twice)."""
    shown = _plain(signature)
    try:
        signature.bind_partial(*args)
    except TypeError as exc:
        return {"args": _misfit(task, shown, str(exc))}
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError as exc:
        return {"kwargs": _misfit(task, shown, str(exc))}
    missing = [
        parameter
        for parameter in signature.parameters.values()
        if parameter.name not in bound.arguments
        and parameter.default is parameter.empty
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]
    if not missing:
        return {}
    names = ", ".join(parameter.name for parameter in missing)
    them = "it" if len(missing) == 1 else "them"
    if all(parameter.kind is parameter.KEYWORD_ONLY for parameter in missing):
        return {"kwargs": _misfit(task, shown, f"nothing gives {names} (add {them} as keywords)")}
    return {"args": _misfit(task, shown, f"nothing gives {names} (add {them} to the arguments)")}


def _misfit(task: str, shown: str, problem: str) -> ValidationError:
    return ValidationError(f"Task {task!r} takes {shown}; {problem}.", code="arguments")


def _plain(signature: inspect.Signature) -> str:
    """The signature as a call reads it: names and defaults, without annotations."""
    parameters = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=parameters, return_annotation=signature.empty))
