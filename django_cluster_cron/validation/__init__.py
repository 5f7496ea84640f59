"""What a valid job definition is: the checks behind the model's ``clean()`` (and so the admin,
the API and declarations in code), and the scheduler's and workers' check of rows that reached
the database some other way (raw SQL, an old row).

Every ``clean_*`` function raises ``django.core.exceptions.ValidationError`` whose message says
what is wrong, with which value, and why. Jobs are read through their attributes: nothing here
imports the models.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError

from ..celery_app import private_task_reason
from ..core.catchup import MAX_WINDOW
from ..core.cron import seconds_first_habit
from ..core.errors import ScheduleError
from ..core.exclusions import ExcludingSchedule, parse_exclusions
from ..core.kinds import Schedule
from ..core.overlap import OverlapPolicy
from ..core.retention import RetentionError, parse_days, parse_keep_last
from ..core.schedules import validate_schedule, validate_timezone
from .jsontypes import json_type
from .pieces import piece_errors
from .task import allowlist_reason, clean_task_name, task_errors

__all__ = [  # what the rest of the app and its tests import from here
    "LIVE_NAME_TAKEN",
    "MAX_JITTER",
    "MAX_JSON_DEPTH",
    "MAX_WHOLE",
    "PRIORITY_RANGE",
    "UNSTORABLE",
    "WINDOW_FORMAT",
    "allowlist_reason",
    "clean_args",
    "clean_kwargs",
    "clean_task_name",
    "definition_errors",
    "json_depth",
    "json_problem",
    "runtime_problem",
    "whole_number",
]

LIVE_NAME_TAKEN = "A job with this name already exists."
MAX_JITTER = 3600  # seconds
# The formats a duration (the catch-up window) is taken in, as a person writes them: Django's
# duration parsing.
WINDOW_FORMAT = (
    "as HH:MM:SS (02:00:00 is two hours), with days first (1 00:00:00), as a number of "
    "seconds (7200), or in ISO 8601 (PT2H)"
)
# A job's priority, for either execution system: django.tasks takes -100..100, Celery 0..255
# (each system's own range is checked against the job's task).
PRIORITY_RANGE = (-100, 255)
MAX_JSON_BYTES = 64 * 1024
# Arguments nest lists and objects at most this deep (real ones nest a few levels; far deeper
# ones break JSON encoders that recurse, in this process or in a worker's).
MAX_JSON_DEPTH = 64
MAX_SLOTS_IN_WINDOW = 10_000
# The widest whole number a database column here holds (a 64-bit signed integer): ids, counts.
MAX_WHOLE = 2**63 - 1
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.:\-]+$")


def whole_number(raw: str) -> int | None:
    """``raw`` as a whole number a database can compare with an id (64-bit signed), or None: an
    id typed into a URL must be refused, not sent to the database to overflow there."""
    try:
        value = int(raw.strip()) if raw.strip().lstrip("+-").isdigit() else None
    except ValueError:
        return None
    return value if value is not None and -MAX_WHOLE - 1 <= value <= MAX_WHOLE else None


def _raise(exc: ScheduleError) -> ValidationError:
    return ValidationError(exc.message, code=f"invalid_{exc.field}")


def clean_cron(value: str) -> None:
    """A valid expression in our dialect, not one that looks written seconds-first."""
    try:
        validate_schedule(value)
    except ScheduleError as exc:
        raise _raise(exc) from None
    habit = seconds_first_habit(value)
    if habit:
        raise ValidationError(habit, code="seconds_first")


def clean_timezone(value: str) -> None:
    try:
        validate_timezone(value)
    except ScheduleError as exc:
        raise _raise(exc) from None


def in_priority_range(priority: int | None) -> bool:
    """Whether ``priority`` is one the field takes (out of it, the field's own error says so)."""
    return priority is None or PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]


def _json_size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


def clean_args(value: object) -> None:
    if not isinstance(value, list):
        raise ValidationError(
            f'Arguments must be a JSON list such as [1, "a"], not a JSON {json_type(value)}.',
            code="invalid_args",
        )
    _check_size("Arguments", value)


def clean_kwargs(value: object) -> None:
    if not isinstance(value, Mapping):
        raise ValidationError(
            'Keyword arguments must be a JSON object such as {"key": 1}, not a JSON '
            f"{json_type(value)}.",
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
    problem = json_problem(value)
    if problem:
        raise ValidationError(f"{what}: {problem}.", code="unstorable")
    size = _json_size(value)
    if size > MAX_JSON_BYTES:
        raise ValidationError(
            f"{what} are {size:,} bytes as JSON; the limit is {MAX_JSON_BYTES:,} bytes. "
            "Pass an id and load large data inside the task.",
            code="too_large",
        )


def json_depth(value: object, limit: int | None = None) -> int:
    """How deeply lists and objects nest in ``value`` (a scalar is 0), without recursion (a
    value may nest deeper than Python's recursion limit); stops counting once past ``limit``."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if limit is not None and deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


# Characters no database text column can hold (NUL: PostgreSQL's jsonb) and that no JSON reply
# can carry as UTF-8 (a lone surrogate, e.g. "\ud800" escaped in a request).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def json_problem(value: object) -> str | None:
    """What makes a JSON value unfit to store and send, and where in it, or None: nesting
    deeper than ``MAX_JSON_DEPTH``, a NUL character or a lone surrogate in a string or a key,
    a number that is not finite."""
    if json_depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        return (
            f"lists and objects nest more than {MAX_JSON_DEPTH} levels deep; flatten them, "
            "or pass an id and load the data inside the task"
        )
    stack: list[tuple[object, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            found = UNSTORABLE.search(item)
            if found:
                return f"at {path or 'the top'}: {_unstorable(found.group())}"
        elif isinstance(item, float) and not math.isfinite(item):
            return f"at {path or 'the top'}: {item} is not a number JSON can hold"
        elif isinstance(item, Mapping):
            for key, child in item.items():
                found = UNSTORABLE.search(key) if isinstance(key, str) else None
                if found:
                    where = f"{path or 'the top'}, key {_shown_key(key)}"
                    return f"at {where}: {_unstorable(found.group())}"
                stack.append((child, f"{path}[{_shown_key(key)}]"))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
    return None


def _unstorable(char: str) -> str:
    if char == "\x00":
        return "a NUL character (\\u0000), which the database cannot store"
    return f"a lone surrogate (\\u{ord(char):04x}), which is not a character"


def _shown_key(key: object) -> str:
    text = json.dumps(key, ensure_ascii=True, default=str)
    return text if len(text) <= 40 else text[:39] + "…"


def clean_queue(value: str) -> None:
    if value and not _QUEUE_NAME.match(value):
        raise ValidationError(
            f"Queue name {value!r} may only contain letters, digits and . _ : -",
            code="invalid_queue",
        )


def clean_catchup_window(schedule: Schedule | None, window: timedelta, now: datetime) -> None:
    """The window must be positive and hold a bounded number of this schedule's slots."""
    if window <= timedelta(0):
        raise ValidationError(
            f"The catch-up window must be longer than zero: give it {WINDOW_FORMAT}.",
            code="invalid",
        )
    if window > MAX_WINDOW:
        raise ValidationError(
            f"A catch-up window of {window} is longer than a century ({MAX_WINDOW.days:,} days): "
            f"give it {WINDOW_FORMAT}.",
            code="window_too_large",
        )
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


def clean_exclusions(value: Any) -> None:
    try:
        parse_exclusions([] if value in (None, "") else value)
    except ScheduleError as exc:
        raise _raise(exc) from None


def clean_fires_again(schedule: Schedule, now: datetime) -> None:
    """Exclusions that leave a repeating schedule nothing to fire on are refused."""
    last = schedule.last_fire()
    if not isinstance(schedule, ExcludingSchedule) or (last is not None and last <= now):
        return
    if schedule.next_after(now) is None:
        raise ValidationError(
            "These exclusions cover every fire time the schedule has left (or, for a "
            "repeating one, every fire time of the next ten years): the job would never run.",
            code="never_fires",
        )


def clean_once_ahead(schedule: Schedule, now: datetime) -> None:
    """A one-off written now must still be ahead: one in the past would never run."""
    last = schedule.last_fire()
    if last is not None and last <= now:
        raise ValidationError(
            f"{schedule.expression!r} is {last:%Y-%m-%d %H:%M:%S} UTC, which has passed: the job "
            "would never run. Give a date and time ahead, or run it now with a manual run.",
            code="in_the_past",
        )


def _schedule_written(job: Any) -> bool:
    """Whether the job is new or its schedule or zone is not the one it was loaded with (a
    one-off that has run stays valid as it is)."""
    loaded = getattr(job, "_loaded", None)
    if job.pk is None or not loaded:
        return True
    return bool(loaded.get("cron") != job.cron or loaded.get("timezone") != job.timezone)


def definition_errors(job: Any, now: datetime) -> dict[str, list[ValidationError]]:
    """Every field error of ``job``'s definition (its name's uniqueness aside), by field."""
    errors: dict[str, list[ValidationError]] = {}

    def check(field: str, func: Any, *args: Any) -> None:
        try:
            func(*args)
        except ValidationError as exc:
            errors.setdefault(field, []).append(exc)

    check("cron", clean_cron, job.cron)
    check("timezone", clean_timezone, job.timezone)
    check("task", clean_task_name, job.task)
    check("args", clean_args, job.args)
    check("kwargs", clean_kwargs, job.kwargs)
    check("queue", clean_queue, job.queue)
    check("exclusions", clean_exclusions, job.exclusions)
    if not {"task", "queue"} & errors.keys():
        judged = set(errors)  # what failed already is not judged against the task
        for field, problem in task_errors(job).items():
            if field not in judged and (field != "priority" or in_priority_range(job.priority)):
                errors.setdefault(field, []).append(problem)
    schedule = None
    if not {"cron", "timezone", "exclusions"} & errors.keys():
        schedule = job.schedule
        check("exclusions", clean_fires_again, schedule, now)
    if isinstance(job.catchup_window, timedelta):  # else the field refused it already
        check("catchup_window", clean_catchup_window, schedule, job.catchup_window, now)
    if schedule is not None and _schedule_written(job):
        check("cron", clean_once_ahead, schedule, now)
    soft, hard = job.soft_time_limit, job.time_limit
    if soft and hard and soft >= hard:
        errors.setdefault("soft_time_limit", []).append(
            ValidationError(
                f"The soft time limit ({soft} s) must be below the hard limit ({hard} s) so the "
                "task can clean up before it is killed."
            )
        )
    if job.start_at and job.end_at and job.end_at <= job.start_at:
        errors.setdefault("end_at", []).append(
            ValidationError(
                f"The end ({job.end_at:%Y-%m-%d %H:%M:%S %Z}) must be after the start "
                f"({job.start_at:%Y-%m-%d %H:%M:%S %Z})."
            )
        )
    first, most = job.retry_backoff, job.retry_backoff_max
    if most is not None and first is not None and most < first:
        errors.setdefault("retry_backoff_max", []).append(
            ValidationError("The maximum backoff must not be below the first backoff.")
        )
    for field, found in piece_errors(job).items():
        if field not in errors:
            errors.setdefault(field, []).extend(found)
    for field, parse in (("retention", parse_days), ("keep_last", parse_keep_last)):
        try:
            parse(getattr(job, field, None))
        except RetentionError as exc:
            errors.setdefault(field, []).append(ValidationError(str(exc), code="invalid_retention"))
    return errors


def runtime_problem(job: Any, *, rules_checked: bool = False) -> str | None:
    """What makes a stored job unusable for the scheduler or a worker, or None.

    Validation normally keeps bad data out; this catches what reached the table anyway (raw SQL,
    an old row, a manual edit), so that one job is reported and parked instead of breaking the
    batch it is in. ``rules_checked``: the caller built the job's catch-up rules already.
    """
    try:
        if not rules_checked:
            job.catchup_rules()
        job.timing()
        job.schedule  # noqa: B018 (parses cron and zone)
    except (ScheduleError, ValueError) as exc:
        return str(exc)
    private = private_task_reason(job.task)
    if private:
        return private
    # Checked when a job is saved and again here: a job saved before the list (or before its
    # task left it) stops, and says why, instead of running on.
    not_allowed = allowlist_reason(job.task)
    if not_allowed:
        return not_allowed
    if job.overlap_policy not in {policy.value for policy in OverlapPolicy}:
        return f"unknown overlap policy {job.overlap_policy!r}"
    if not isinstance(job.args, list):
        return f"args must be a JSON list, the row holds {type(job.args).__name__}"
    if not isinstance(job.kwargs, dict) or not all(isinstance(k, str) for k in job.kwargs):
        return "kwargs must be a JSON object with string keys"
    return None
