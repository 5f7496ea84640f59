"""``CLUSTER_CRON["MONITORS"]``, read: one :class:`Watch` per entry, its sink built once.

An entry names its sink — ``"sentry"``, ``"ping"`` or the dotted path of a
:class:`~.base.MonitorSink` subclass — and may say which jobs it watches and how a job becomes a
monitor; every other key is the sink's own option, passed to its constructor. Which jobs are
watched is decided here, by name patterns and run triggers, so opting a job in or out is a
settings change, never a migration. A sink's module is imported only when an entry names it: with
no entries nothing is imported at all (``sentry_sdk`` only for the Sentry sink).

The built sinks are kept while the setting is unchanged (compared by value, so tests may
override it); a changed setting builds them again.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ...conf import SETTINGS_NAME, app_settings
from .base import MonitorSink

SHORT_NAMES = {
    "sentry": "django_cluster_cron.ops.monitors.sentry.SentrySink",
    "ping": "django_cluster_cron.ops.monitors.pings.PingSink",
}
# The keys every entry may have; the rest are the sink's.
COMMON = ("sink", "jobs", "exclude", "triggers", "slug", "margin", "max_runtime")
DEFAULT_MARGIN = 60.0


@dataclass(frozen=True)
class Watch:
    """One entry of the setting: its sink, which runs it hears of, and how jobs look to it."""

    label: str
    sink: MonitorSink
    jobs: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    triggers: tuple[str, ...] | None = None
    slug: str = "{job}"
    margin: timedelta = timedelta(seconds=DEFAULT_MARGIN)
    max_runtime: timedelta | None = None

    def watches(self, job_name: str, trigger: str | None = None) -> bool:
        if trigger is not None and self.triggers is not None and trigger not in self.triggers:
            return False
        matches = any(fnmatch.fnmatchcase(job_name, p) for p in self.jobs)
        return matches and not any(fnmatch.fnmatchcase(job_name, p) for p in self.exclude)


def _fail(index: int, message: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"settings.{SETTINGS_NAME}['MONITORS'][{index}]: {message}")


def _patterns(index: int, spec: Mapping[str, Any], key: str, default: Sequence[str] | None) -> Any:
    value = spec.get(key, default)
    if value is None and key == "triggers":
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise _fail(index, f"{key!r} must be a list of strings, not {value!r}.")
    if not all(isinstance(item, str) and item for item in value):
        raise _fail(index, f"{key!r} must be a list of non-empty strings.")
    return tuple(value)


def _seconds(index: int, spec: Mapping[str, Any], key: str, default: float | None) -> Any:
    value = spec.get(key, default)
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise _fail(index, f"{key!r} must be a number of seconds >= 0, not {value!r}.")
    return timedelta(seconds=value)


def build(index: int, spec: Mapping[str, Any]) -> Watch:
    """One entry, checked, with its sink constructed (ImproperlyConfigured naming the entry)."""
    name = str(spec["sink"]).strip()
    path = SHORT_NAMES.get(name, name)
    try:
        sink_class = import_string(path)
    except ImportError as exc:
        raise _fail(index, f"cannot import sink {name!r}: {exc}") from None
    if not (isinstance(sink_class, type) and issubclass(sink_class, MonitorSink)):
        raise _fail(index, f"{path} is not a MonitorSink subclass.")
    options = {key: value for key, value in spec.items() if key not in COMMON}
    try:
        sink = sink_class(**options)
    except (TypeError, ValueError) as exc:
        raise _fail(index, f"sink {name!r}: {exc}") from None
    slug = spec.get("slug", "{job}")
    if not isinstance(slug, str) or not slug.strip():
        raise _fail(index, "'slug' must be a non-empty template such as 'prod-{job}'.")
    try:
        slug.format(job="job", id=1)
    except (KeyError, IndexError, ValueError) as exc:
        raise _fail(index, f"'slug' may use {{job}} and {{id}} only: {exc!r}.") from None
    return Watch(
        label=f"{index}:{name}",
        sink=sink,
        jobs=_patterns(index, spec, "jobs", ("*",)),
        exclude=_patterns(index, spec, "exclude", ()),
        triggers=_patterns(index, spec, "triggers", None),
        slug=slug,
        margin=_seconds(index, spec, "margin", DEFAULT_MARGIN),
        max_runtime=_seconds(index, spec, "max_runtime", None),
    )


class _Built:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.specs: object = ()
        self.watches: tuple[Watch, ...] = ()


_built = _Built()


def watches() -> tuple[Watch, ...]:
    """The entries of the setting as it is now, their sinks built once per value."""
    specs = app_settings.MONITORS
    with _built.lock:
        if specs != _built.specs:
            _built.watches = tuple(build(i, spec) for i, spec in enumerate(specs))
            _built.specs = specs
        return _built.watches
