"""One event, one log line: text that operators or tasks control is escaped where it is logged.

A job or lock name, a pause note or a task's exception message can hold a newline; logged as it
is, it would start a line of its own and could pass for an event the app never wrote (log
injection). :class:`OneLine` escapes control characters (``\\n`` becomes the two characters
``\\`` ``n``) in the values a log call interpolates, on every logger of the app (:data:`LOGGERS`,
installed when Django loads the app). Tracebacks (``exc_info``) are left to the handler's
formatter: they are multi-line by design and never mistaken for an event line.
"""

from __future__ import annotations

import logging
import re
from typing import Any

# Every logger the app writes to (a test holds this list to the names used in the code).
LOGGERS = (
    "django_cluster_cron",
    "django_cluster_cron.admin",
    "django_cluster_cron.leases",
    "django_cluster_cron.locks",
    "django_cluster_cron.metrics",
    "django_cluster_cron.monitors",
    "django_cluster_cron.operations",
    "django_cluster_cron.scheduler",
    "django_cluster_cron.status",
    "django_cluster_cron.sync",
    "django_cluster_cron.tracing",
    "django_cluster_cron.worker",
)

# Control characters, and the two Unicode line separators some viewers break lines at.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f\u2028\u2029]")


def one_line(text: str) -> str:
    r"""``text`` with control characters escaped as ``\n``, ``\r``, ``\x1b``, ``\u2028`` ..."""
    return _CONTROL.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def _value(value: Any) -> Any:
    if isinstance(value, str):
        return one_line(value) if _CONTROL.search(value) else value
    if isinstance(value, BaseException):
        text = str(value)
        return one_line(text) if _CONTROL.search(text) else value
    return value


class OneLine(logging.Filter):
    """Escapes control characters in a record's arguments (never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_value(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: _value(arg) for key, arg in record.args.items()}
        return True


_FILTER = OneLine()


def install() -> None:
    """Put :class:`OneLine` on every logger of :data:`LOGGERS` (once)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
