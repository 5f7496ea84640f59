"""The app's settings: one typed object over ``settings.CLUSTER_CRON``.

Values are read at access time (so ``override_settings`` works in tests) and defaults live in
one table, :data:`DEFAULTS`, which docs/reference/settings.md mirrors. Bad values are reported by
the system checks in :mod:`django_cluster_cron.checks`; reading a bad value here raises
``ImproperlyConfigured`` naming the setting.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

SETTINGS_NAME = "CLUSTER_CRON"
NODE_ID_ENV = "CLUSTER_CRON_NODE_ID"


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


@dataclass(frozen=True)
class Setting:
    default: Any
    parse: Callable[[object], Any]
    doc: str


DEFAULTS: dict[str, Setting] = {
    "REDIS_ALIAS": Setting(
        "default", _text, "Cache alias (django-redis) whose Redis holds the leader lease and locks."
    ),
    "KEY_PREFIX": Setting("cluster_cron", _text, "Prefix of every Redis key the app writes."),
    "LEASE_BACKEND": Setting(
        None,
        lambda v: None if v is None else _choice("redis", "database", "memory")(v),
        "Where leases live: 'redis', 'database' or 'memory' (one process: tests only). None: "
        "'redis' if a django-redis cache is configured under REDIS_ALIAS, else 'database'.",
    ),
    "CELERY_APP": Setting(
        None,
        _optional_text,
        "Celery app as 'module:attribute'; None uses celery.current_app (the project's app).",
    ),
    "LEASE_TTL": Setting(10.0, _positive_seconds, "Leader lease time-to-live, seconds."),
    "RENEW_INTERVAL": Setting(
        None, _optional_seconds, "How often the leader renews its lease; None means LEASE_TTL / 3."
    ),
    "POLL_INTERVAL": Setting(
        1.0, _positive_seconds, "How often a standby tries to take the lease, seconds."
    ),
    "BATCH_SIZE": Setting(500, _positive_int, "Due jobs planned per database round trip."),
    "CATCHUP_POLICY": Setting(
        "latest", _choice("all", "latest", "none"), "Default catch-up policy of new jobs."
    ),
    "CATCHUP_WINDOW": Setting(
        3600.0, _positive_seconds, "Default catch-up window of new jobs, seconds."
    ),
    "CATCHUP_CAP": Setting(
        10, _positive_int, "Most runs one job gets from one catch-up (policy 'all' and 'none')."
    ),
    "ON_TIME_GRACE": Setting(
        60.0,
        _non_negative_seconds,
        "A slot dispatched within this many seconds counts as on time (trigger 'schedule').",
    ),
    "MISSED_RECORD_LIMIT": Setting(
        100,
        _non_negative_int,
        "Most 'missed' runs recorded one by one per job and catch-up; older ones are summarised.",
    ),
    "OVERLAP_POLICY": Setting(
        "allow", _choice("allow", "skip", "buffer_one"), "Default overlap policy of new jobs."
    ),
    "LOOKAHEAD": Setting(
        60.0,
        _non_negative_seconds,
        "How long before its due time a run is recorded and its message built, seconds; at the "
        "instant the leader only publishes. 0 records each run when it is due.",
    ),
    "LOOKAHEAD_RUNS": Setting(
        100_000,
        _non_negative_int,
        "Most runs recorded ahead with their messages held by the leader at once (about 100 "
        "bytes each); beyond it, runs are recorded when due.",
    ),
    "OUTBOX_REPUBLISH_AFTER": Setting(
        30.0,
        _positive_seconds,
        "Re-publish a recorded run no worker picked up after this many seconds.",
    ),
    "MESSAGE_FORM": Setting(
        "auto",
        _choice("auto", "task", "execute_run"),
        "What a run's message is: 'task' (the job's own task), 'execute_run' (the form workers "
        "before 0.2 run) or 'auto' (the job's task once every worker answering says it can).",
    ),
    "MESSAGE_FORM_PROBE_INTERVAL": Setting(
        30.0,
        _positive_seconds,
        "With MESSAGE_FORM 'auto': how often the leader asks the workers which form they run.",
    ),
    "TASK_ALLOWLIST": Setting(
        None,
        _patterns,
        "None, or glob patterns of the Celery task names jobs may use (e.g. ['billing.*']).",
    ),
    "REDACT_KEYS": Setting(
        DEFAULT_REDACT_KEYS,
        _markers,
        "Parts of argument key names whose values the admin and the API show masked "
        "(lowercase; a key matches when its lowercased name contains one).",
    ),
    "DEFAULT_QUEUE": Setting(
        None, _optional_text, "Queue for jobs that name none; None uses Celery's routing."
    ),
    "RUN_RETENTION_DAYS": Setting(30, _positive_int, "prune_runs keeps this many days of runs."),
    "RUN_HEARTBEAT_INTERVAL": Setting(
        10.0, _positive_seconds, "How often a worker marks a running run as alive, seconds."
    ),
    "RUN_LOST_AFTER": Setting(
        60.0,
        _positive_seconds,
        "A running run with no heartbeat for this long is declared lost (its worker died).",
    ),
    "JOBS": Setting(
        {},
        _jobs,
        "Jobs declared in settings: name -> {'task', 'schedule', 'args', 'kwargs', 'options', "
        "other job fields}; synced by sync_jobs and after migrate.",
    ),
    "JOBS_VERSION": Setting(
        None,
        _optional_version,
        "A number that grows with each release of your code's job declarations; a sync from "
        "an older release than the last one applied is skipped (rolling deploys).",
    ),
    "SYNC_JOBS_ON_MIGRATE": Setting(
        True, _bool, "Sync declared jobs to the database after `manage.py migrate`."
    ),
    "METRICS": Setting(
        True,
        _bool,
        "Collect Prometheus metrics (needs the metrics extra, prometheus_client); False turns "
        "every metric into a no-op.",
    ),
    "METRICS_JOB_LABEL_LIMIT": Setting(
        100,
        _non_negative_int,
        "Most job names a process labels run durations with; later ones share the label "
        "'_other'. 0 drops the job label.",
    ),
    "WORKER_METRICS_PORT": Setting(
        None,
        _optional_port,
        "Celery workers serve /metrics on this port (all pool processes added up); None: off.",
    ),
    "WORKER_METRICS_HOST": Setting(
        "0.0.0.0",
        _text,
        "The address a worker's /metrics listens on ('127.0.0.1': this host only).",
    ),
    "CLOCK_SKEW_WARNING": Setting(
        1.0,
        _positive_seconds,
        "A node whose clock is off the database's by more than this many seconds logs "
        "clock.skew and shows it on the cluster page (it still dispatches on time).",
    ),
    "HEALTH_TOKEN": Setting(
        None,
        _optional_text,
        "A secret that shows the health view's details (reasons, nodes, epochs) to a caller "
        "sending it as 'Authorization: Bearer <token>'. None: only logged-in users with the "
        "view permission of the cluster status see them; everyone else gets statuses only.",
    ),
    "HEALTH_CACHE": Setting(
        2.0,
        _non_negative_seconds,
        "Seconds the health view answers from its last report (per process), so that a flood of "
        "probes costs one round of checks and one broker connection per interval. 0: no cache.",
    ),
    "MONITORS": Setting(
        [],
        _monitors,
        "Cron monitors fed from each run's start and end: a list of sinks, each a dict with "
        "'sink' ('sentry', 'ping' or a dotted path to a class) and its options. Empty: none.",
    ),
}


class ClusterCronSettings:
    """Typed, read-at-access-time view of ``settings.CLUSTER_CRON``."""

    @staticmethod
    def raw() -> Mapping[str, object]:
        value = getattr(settings, SETTINGS_NAME, {})
        if not isinstance(value, Mapping):
            raise ImproperlyConfigured(f"settings.{SETTINGS_NAME} must be a dict.")
        return value

    def get(self, name: str) -> Any:
        setting = DEFAULTS[name]
        value = self.raw().get(name, setting.default)
        try:
            return setting.parse(value)
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"settings.{SETTINGS_NAME}[{name!r}] is {value!r}; expected {exc}."
            ) from None

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
