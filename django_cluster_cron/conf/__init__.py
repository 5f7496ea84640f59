"""The app's settings: one typed object over ``settings.CLUSTER_CRON``.

Values are read at access time (so ``override_settings`` works in tests) and defaults live in
one table, :data:`DEFAULTS`, which docs/reference/settings.md mirrors. Bad values are reported by
the system checks in :mod:`django_cluster_cron.checks`; reading a bad value here raises
``ImproperlyConfigured`` naming the setting.
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .table import DEFAULTS, Setting
from .values import DEFAULT_REDACT_KEYS

__all__ = [
    "DEFAULTS",
    "DEFAULT_REDACT_KEYS",
    "NODE_ID_ENV",
    "SETTINGS_NAME",
    "ClusterCronSettings",
    "Setting",
    "app_settings",
]

SETTINGS_NAME = "CLUSTER_CRON"
NODE_ID_ENV = "CLUSTER_CRON_NODE_ID"


# Values that cannot change in place: one seen before is the same setting.
_IMMUTABLE = (str, int, float, bool, type(None))


def _shareable(parsed: object) -> bool:
    """Whether one parsed value can be handed to every reader (nothing in it can change)."""
    if isinstance(parsed, tuple):
        return all(isinstance(item, _IMMUTABLE) for item in parsed)
    return isinstance(parsed, (*_IMMUTABLE, timedelta))


class ClusterCronSettings:
    """Typed, read-at-access-time view of ``settings.CLUSTER_CRON``.

    A value is parsed once and the result reused while the project's value stays what it was
    (the same object; for a list or dict, also equal to a copy taken when it was parsed, so a
    test that changes one in place is seen). A worker reads several settings for every run.
    """

    def __init__(self) -> None:
        # name -> (the raw value parsed, a copy of it if it can change in place, the result)
        self._parsed: dict[str, tuple[object, object, Any]] = {}

    @staticmethod
    def raw() -> Mapping[str, object]:
        value = getattr(settings, SETTINGS_NAME, {})
        if not isinstance(value, Mapping):
            raise ImproperlyConfigured(f"settings.{SETTINGS_NAME} must be a dict.")
        return value

    def get(self, name: str) -> Any:
        setting = DEFAULTS[name]
        value = self.raw().get(name, setting.default)
        seen = self._parsed.get(name)
        if seen is not None and seen[0] is value and (seen[1] is _IMMUTABLE or seen[1] == value):
            return seen[2]
        try:
            parsed = setting.parse(value)
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"settings.{SETTINGS_NAME}[{name!r}] is {value!r}; expected {exc}."
            ) from None
        if not _shareable(parsed):  # a caller may change what it got: parse at every read
            return parsed
        if isinstance(value, _IMMUTABLE):
            self._parsed[name] = (value, _IMMUTABLE, parsed)
        else:
            try:
                self._parsed[name] = (value, copy.deepcopy(value), parsed)
            except Exception:  # a value no copy can be taken of is parsed at every read
                self._parsed.pop(name, None)
        return parsed

    @property
    def REDIS_ALIAS(self) -> str:
        return str(self.get("REDIS_ALIAS"))

    @property
    def KEY_PREFIX(self) -> str:
        return str(self.get("KEY_PREFIX"))

    @property
    def LEASE_BACKEND(self) -> str | None:
        value: str | None = self.get("LEASE_BACKEND")
        return value

    @property
    def CELERY_APP(self) -> str | None:
        value: str | None = self.get("CELERY_APP")
        return value

    @property
    def LEASE_TTL(self) -> float:
        return float(self.get("LEASE_TTL"))

    @property
    def RENEW_INTERVAL(self) -> float:
        value: float | None = self.get("RENEW_INTERVAL")
        return self.LEASE_TTL / 3 if value is None else value

    @property
    def POLL_INTERVAL(self) -> float:
        return float(self.get("POLL_INTERVAL"))

    @property
    def BATCH_SIZE(self) -> int:
        return int(self.get("BATCH_SIZE"))

    @property
    def CATCHUP_POLICY(self) -> str:
        return str(self.get("CATCHUP_POLICY"))

    @property
    def CATCHUP_WINDOW(self) -> timedelta:
        return timedelta(seconds=self.get("CATCHUP_WINDOW"))

    @property
    def CATCHUP_CAP(self) -> int:
        return int(self.get("CATCHUP_CAP"))

    @property
    def ON_TIME_GRACE(self) -> timedelta:
        return timedelta(seconds=self.get("ON_TIME_GRACE"))

    @property
    def MISSED_RECORD_LIMIT(self) -> int:
        return int(self.get("MISSED_RECORD_LIMIT"))

    @property
    def OVERLAP_POLICY(self) -> str:
        return str(self.get("OVERLAP_POLICY"))

    @property
    def LOOKAHEAD(self) -> timedelta:
        return timedelta(seconds=self.get("LOOKAHEAD"))

    @property
    def LOOKAHEAD_RUNS(self) -> int:
        return int(self.get("LOOKAHEAD_RUNS"))

    @property
    def OUTBOX_REPUBLISH_AFTER(self) -> timedelta:
        return timedelta(seconds=self.get("OUTBOX_REPUBLISH_AFTER"))

    @property
    def MESSAGE_FORM(self) -> str:
        return str(self.get("MESSAGE_FORM"))

    @property
    def MESSAGE_FORM_PROBE_INTERVAL(self) -> float:
        return float(self.get("MESSAGE_FORM_PROBE_INTERVAL"))

    @property
    def TASK_ALLOWLIST(self) -> tuple[str, ...] | None:
        value: tuple[str, ...] | None = self.get("TASK_ALLOWLIST")
        return value

    @property
    def REDACT_KEYS(self) -> tuple[str, ...]:
        value: tuple[str, ...] = self.get("REDACT_KEYS")
        return value

    @property
    def DEFAULT_QUEUE(self) -> str | None:
        value: str | None = self.get("DEFAULT_QUEUE")
        return value

    @property
    def RUN_RETENTION_DAYS(self) -> int:
        return int(self.get("RUN_RETENTION_DAYS"))

    @property
    def RUN_HEARTBEAT_INTERVAL(self) -> float:
        return float(self.get("RUN_HEARTBEAT_INTERVAL"))

    @property
    def RUN_LOST_AFTER(self) -> timedelta:
        return timedelta(seconds=self.get("RUN_LOST_AFTER"))

    @property
    def JOBS(self) -> Any:
        """A dict of job name -> fields when well formed; anything else is reported per entry."""
        return self.get("JOBS")

    @property
    def JOBS_VERSION(self) -> int | None:
        value: int | None = self.get("JOBS_VERSION")
        return value

    @property
    def SYNC_JOBS_ON_MIGRATE(self) -> bool:
        return bool(self.get("SYNC_JOBS_ON_MIGRATE"))

    @property
    def METRICS(self) -> bool:
        return bool(self.get("METRICS"))

    @property
    def METRICS_JOB_LABEL_LIMIT(self) -> int:
        return int(self.get("METRICS_JOB_LABEL_LIMIT"))

    @property
    def WORKER_METRICS_PORT(self) -> int | None:
        value: int | None = self.get("WORKER_METRICS_PORT")
        return value

    @property
    def WORKER_METRICS_HOST(self) -> str:
        return str(self.get("WORKER_METRICS_HOST"))

    @property
    def CLOCK_SKEW_WARNING(self) -> timedelta:
        return timedelta(seconds=self.get("CLOCK_SKEW_WARNING"))

    @property
    def HEALTH_TOKEN(self) -> str | None:
        value: str | None = self.get("HEALTH_TOKEN")
        return value

    @property
    def HEALTH_CACHE(self) -> float:
        return float(self.get("HEALTH_CACHE"))

    @property
    def MONITORS(self) -> tuple[dict[str, Any], ...]:
        value: tuple[dict[str, Any], ...] = self.get("MONITORS")
        return value

    def task_allowed(self, name: str) -> bool:
        patterns = self.TASK_ALLOWLIST
        return patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns)


app_settings = ClusterCronSettings()
