"""Secret-looking keys of job arguments, shown masked wherever an operator reads them.

A job's ``args`` and ``kwargs`` are stored and sent to its task as they are: the task needs them.
Wherever people read them (the admin's job page and history, the API's job bodies and history),
the value of every mapping key that looks secret is shown as :data:`MASK` instead. A key looks
secret when its name, lowercased, contains one of ``REDACT_KEYS`` (``password``, ``token``,
``key``, …): like Django's own error reports, this errs on the side of hiding.

Editing stays possible: a masked value sent back unchanged (the admin's form, an API ``PUT`` of
what a ``GET`` gave) keeps the stored value at the same place. Only a new value replaces it.
"""

from __future__ import annotations

from typing import Any

from .conf import app_settings

MASK = "********"

# Fields of a job whose values are arguments of its task.
ARGUMENT_FIELDS = ("args", "kwargs")


def secret(key: object, markers: tuple[str, ...] | None = None) -> bool:
    """Whether a mapping key names a secret (``REDACT_KEYS``, or ``markers`` read once by a
    caller that looks at many keys)."""
    name = str(key).lower()
    return any(marker in name for marker in markers or app_settings.REDACT_KEYS)


def redact(value: Any, markers: tuple[str, ...] | None = None) -> Any:
    """``value`` with the value of every secret-looking key, at any depth, replaced by MASK
    (``markers``: ``REDACT_KEYS`` read once by a caller that masks many values)."""
    markers = app_settings.REDACT_KEYS if markers is None else markers
    return _redact(value, markers) if markers else value


def _redact(value: Any, markers: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {
            key: MASK if item is not None and secret(key, markers) else _redact(item, markers)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_redact(item, markers) for item in value]
    if isinstance(value, tuple):
        return tuple(_redact(item, markers) for item in value)
    return value


def restore(sent: Any, stored: Any) -> Any:
    """What ``sent`` means given the ``stored`` value it was read from: each MASK under a
    secret-looking key becomes the stored value at the same place, when there is one."""
    markers = app_settings.REDACT_KEYS
    return _restore(sent, stored, markers) if markers else sent


def _restore(sent: Any, stored: Any, markers: tuple[str, ...]) -> Any:
    if isinstance(sent, dict) and isinstance(stored, dict):
        restored = {}
        for key, item in sent.items():
            if key in stored and item == MASK and secret(key, markers):
                restored[key] = stored[key]
            else:
                restored[key] = _restore(item, stored.get(key), markers)
        return restored
    if isinstance(sent, list) and isinstance(stored, list):
        return [
            _restore(item, stored[index] if index < len(stored) else None, markers)
            for index, item in enumerate(sent)
        ]
    return sent


def redact_changes(changes: dict[str, Any]) -> dict[str, Any]:
    """A history entry's ``{"field": [old, new]}`` with the arguments' secrets masked."""
    return {
        field: redact(values) if field in ARGUMENT_FIELDS else values
        for field, values in changes.items()
    }
