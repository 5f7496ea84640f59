"""How each setting's value is read: a parser per kind of value, raising ``ValueError`` with
what was expected (the settings object turns it into ``ImproperlyConfigured`` naming the key).
The parsers are the conf package's own: each setting's declaration names its parser, whose
return type is the setting's type."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from ..core.retention import RetentionError, parse_days, parse_keep_last


def _positive_seconds(value: object) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError("a positive number of seconds (or a timedelta)")
    return float(value)


def _non_negative_seconds(value: object) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError("a number of seconds >= 0 (or a timedelta)")
    return float(value)


def _optional_seconds(value: object) -> float | None:
    return None if value is None else _positive_seconds(value)


def _positive_duration(value: object) -> timedelta:
    return timedelta(seconds=_positive_seconds(value))


def _non_negative_duration(value: object) -> timedelta:
    return timedelta(seconds=_non_negative_seconds(value))


def _positive_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("a whole number >= 1")
    return value


def _non_negative_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("a whole number >= 0")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a non-empty string")
    return value


def _optional_text(value: object) -> str | None:
    return None if value is None else _text(value)


def _choice(*choices: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        if value not in choices:
            raise ValueError("one of " + ", ".join(repr(c) for c in choices))
        return str(value)

    return check


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError("True or False")
    return value


def _optional_port(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError("None or a TCP port number (0-65535; 0 picks a free one)")
    return value


def _jobs(value: object) -> Any:
    """Taken as it is: each entry is read and checked on its own (``declared.reading``), so that
    one bad entry is reported on that entry and never stops the others (nor the scheduler)."""
    return dict(value) if isinstance(value, Mapping) else value


def _optional_version(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("None or a whole number >= 0 that grows with each release")
    return value


def _patterns(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError("None or a list of task name patterns such as ['myapp.tasks.*']")
    if not all(isinstance(item, str) and item for item in value):
        raise ValueError("None or a list of non-empty strings")
    return tuple(value)


# Parts of key names that hold secrets, after Django's own list for error reports.
DEFAULT_REDACT_KEYS = [
    "pass",
    "secret",
    "token",
    "key",
    "auth",
    "credential",
    "signature",
    "cookie",
    "session",
    "private",
    "dsn",
]


def _markers(value: object) -> tuple[str, ...]:
    problem = "a list of lowercase strings such as ['password', 'token'] (or [] for none)"
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(problem)
    if not all(isinstance(item, str) and item and item == item.lower() for item in value):
        raise ValueError(problem)
    return tuple(value)


def _monitors(value: object) -> tuple[dict[str, Any], ...]:
    problem = "a list of dicts, each naming its 'sink': 'sentry', 'ping' or a dotted path"
    if isinstance(value, (str, Mapping)) or not isinstance(value, (list, tuple)):
        raise ValueError(problem)
    for spec in value:
        sink = spec.get("sink") if isinstance(spec, Mapping) else None
        if not isinstance(sink, str) or not sink.strip():
            raise ValueError(problem)
    return tuple(dict(spec) for spec in value)


def _retention_days(value: object) -> dict[str, int | None]:
    try:
        return parse_days(value)
    except RetentionError as exc:
        raise ValueError(f"an object of final statuses and days ({exc})") from None


def _keep_last(value: object) -> dict[str, int]:
    try:
        return parse_keep_last(value)
    except RetentionError as exc:
        raise ValueError(
            f"a number of runs, or an object of final statuses and numbers ({exc})"
        ) from None
