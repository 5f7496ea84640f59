"""What a job declared in code is: its fields (:class:`Declaration`), why one is left out
(:class:`Rejected`), and all of them as one collection found them (:class:`Declared`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..models.fields import DEFINITION_FIELDS

# The fields code owns (the model's DEFINITION_FIELDS): the admin shows them read-only on a
# declared job. Operators keep enabled/pause_note (pause, resume) and the actions.
CODE_FIELDS = DEFINITION_FIELDS
SETTINGS_ORIGIN = "settings CLUSTER_CRON['JOBS']"
# A job field a declaration writes under another name.
DECLARED_AS = {"cron": "schedule"}
NOT_REMOVED = "not disabled as removed from code"


class DeclarationError(Exception):
    """A declaration that cannot even be read (an unknown key, a schedule of the wrong type);
    ``field`` names the key at fault ("" for the entry as a whole)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Declaration:
    """One job as code declares it: its name, the fields code owns, and where it was written."""

    name: str
    origin: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def job(self) -> Any:
        """An unsaved JobDefinition with these values (the model's defaults for the rest)."""
        from ..models import JobDefinition

        return JobDefinition(name=self.name, **dict(self.values))

    def errors(self) -> dict[str, list[str]]:
        """What ``full_clean()`` says of it, per field (empty when valid). Never raises: a value
        of a type some check does not expect is reported on its field when the field's own
        cleaning names it, else under ``__all__``."""
        from django.core.exceptions import NON_FIELD_ERRORS, ValidationError

        try:
            job = self.job()
            # The live-name uniqueness is sync's business (a declared job updates its own row),
            # and this runs at `manage.py check`, maybe before the tables exist.
            job.check_name_in_database = False
            job.full_clean(validate_constraints=False)
        except ValidationError as exc:
            return _as_declared(exc.message_dict)
        except Exception as exc:  # a type no check expects: reported, never a crash
            try:
                self.job().clean_fields()
            except ValidationError as by_field:
                return _as_declared(by_field.message_dict)
            except Exception:  # the first error is the one reported below
                pass
            return {NON_FIELD_ERRORS: [f"cannot be checked: {type(exc).__name__}: {exc}"]}
        return {}

    def digest(self) -> str:
        return hashlib.sha256(_canonical({"name": self.name, **self.values}).encode()).hexdigest()


def _as_declared(errors: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """The model's errors under the names a declaration uses: the job's ``cron`` is declared
    as ``schedule`` (the settings entry's key, the decorator's first argument)."""
    return {DECLARED_AS.get(name, name): list(messages) for name, messages in errors.items()}


@dataclass(frozen=True)
class Rejected:
    """A declaration left out: its job's name (``#<n>`` for a settings entry whose key is no
    name), where it is declared, and what is wrong as ``(field, message)`` pairs (field "" when
    the entry as a whole is at fault). ``unreadable``: it could not even be read as a job (an
    unknown key, a name declared twice), as opposed to a job the model's validation refuses."""

    name: str
    origin: str
    problems: tuple[tuple[str, str], ...]
    unreadable: bool = False

    def text(self) -> str:
        """The problems in one line, a sentence each: ``cron: minute field ... task: ...``."""
        return " ".join(
            sentence(f"{name}: {message}" if name else message) for name, message in self.problems
        )


def sentence(text: str) -> str:
    """``text`` ending with a full stop (the model's messages mostly do, ours not always)."""
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else f"{text}."


@dataclass
class Declared:
    """Every declaration, split into the ones a sync applies and the ones it leaves out."""

    valid: list[Declaration] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    # Why the running settings say nothing of the jobs declared in CLUSTER_CRON["JOBS"], and so
    # what a sync does not do ("" when they do): JOBS is not set (a one-off settings module) or
    # cannot be read. A sync then takes none of the jobs synced from settings for removed.
    settings_unknown: str = ""

    def left_out(self) -> set[str]:
        return {rejected.name for rejected in self.rejected}

    def unknown_reason(self, origin: str) -> str:
        """Why a job synced from ``origin`` and not declared now cannot be taken for removed:
        what declared it was not read here ("" when it was, and no longer declares the job)."""
        if origin.startswith(SETTINGS_ORIGIN):
            return self.settings_unknown
        why = unread_module(origin)
        return f"{why}: {NOT_REMOVED}" if why else ""


def unread_module(origin: str) -> str:
    """For a job declared with ``@cron`` at ``origin`` (``module:line``): why that module does
    not tell whether it still declares the job, or "" when it does tell (it was imported here,
    so its decorators ran, or it no longer exists)."""
    import importlib.util
    import sys

    module = origin.rpartition(":")[0] if origin.rpartition(":")[2].isdigit() else origin
    if not module or module in sys.modules:
        return ""
    try:
        exists = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its package is gone too
        exists = False
    except Exception as exc:  # its package fails to import here: nothing is known
        return f"declared at {origin}, in {module}, which cannot be imported here ({exc})"
    if not exists:
        return ""
    return f"declared at {origin}, in {module}, a module not imported under these settings"


def _canonical(value: Any) -> str:
    def default(obj: Any) -> Any:
        if isinstance(obj, timedelta):
            return obj.total_seconds()
        return str(obj)

    return json.dumps(value, sort_keys=True, default=default)


def problems_of(errors: Mapping[str, list[str]]) -> tuple[tuple[str, str], ...]:
    from django.core.exceptions import NON_FIELD_ERRORS

    return tuple(
        ("" if name == NON_FIELD_ERRORS else name, " ".join(str(m) for m in messages))
        for name, messages in sorted(errors.items())
    )


def values_of(raw: Mapping[str, Any], *, hint: str = "") -> dict[str, Any]:
    """The job fields of a declaration; :class:`DeclarationError` for a key code does not own
    (``hint`` is added to its message, e.g. the key that was probably meant)."""
    from ..models import JobDefinition

    known = {f.name for f in JobDefinition._meta.get_fields()}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in CODE_FIELDS:
            why = (
                "operators own it (pause and resume in the admin or the API)"
                if key in known
                else "not a job field"
            )
            raise DeclarationError(f"{key!r} cannot be declared: {why}{hint}", str(key))
        values[key] = value
    window = values.get("catchup_window")
    if isinstance(window, (int, float)) and not isinstance(window, bool):
        values["catchup_window"] = timedelta(seconds=window)
    return values
