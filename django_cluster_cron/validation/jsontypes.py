"""What JSON calls the type of a value, for the messages that refuse one."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["json_type"]


def json_type(value: object) -> str:
    """What JSON calls the value's type (a form's parsed string is a ``str`` subclass)."""
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "list"
    if value is None:
        return "null"
    for kind, name in ((bool, "boolean"), (str, "string"), (int | float, "number")):
        if isinstance(value, kind):
            return name
    return type(value).__name__
