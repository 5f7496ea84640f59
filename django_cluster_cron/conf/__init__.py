"""The app's settings: one typed object over ``settings.CLUSTER_CRON``.

Each setting is declared once, as a :class:`Setting` on :class:`ClusterCronSettings`: its
default, how its value is read and what it does. Values are read at access time (so
``override_settings`` works in tests). :data:`DEFAULTS` maps each name to its declaration, and
docs/reference/settings.md mirrors them (the test suite compares them). Bad values are reported
by the system checks in :mod:`django_cluster_cron.checks`; reading a bad value here raises
``ImproperlyConfigured`` naming the setting.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from .setting import SETTINGS_NAME, Setting, SettingsReader
from .values import (
    DEFAULT_REDACT_KEYS,
    _bool,
    _choice,
    _jobs,
    _keep_last,
    _markers,
    _monitors,
    _non_negative_duration,
    _non_negative_int,
    _non_negative_seconds,
    _optional_port,
    _optional_seconds,
    _optional_text,
    _optional_version,
    _patterns,
    _positive_duration,
    _positive_int,
    _positive_seconds,
    _retention_days,
    _text,
)

__all__ = [
    "DEFAULTS",
    "DEFAULT_REDACT_KEYS",
    "NODE_ID_ENV",
    "SETTINGS_NAME",
    "ClusterCronSettings",
    "Setting",
    "app_settings",
]

NODE_ID_ENV = "CLUSTER_CRON_NODE_ID"


class ClusterCronSettings(SettingsReader):
    """Every key of ``settings.CLUSTER_CRON``, each declared once: default, parser, doc.

    A new setting is one more declaration here (and its row in docs/reference/settings.md).
    """

    REDIS_ALIAS = Setting(
        "default", _text, "Cache alias (django-redis) whose Redis holds the leader lease and locks."
    )
    KEY_PREFIX = Setting("cluster_cron", _text, "Prefix of every Redis key the app writes.")
    LEASE_BACKEND = Setting(
        None,
        lambda v: None if v is None else _choice("redis", "database", "memory")(v),
        "Where leases live: 'redis', 'database' or 'memory' (one process: tests only). None: "
        "'redis' if a django-redis cache is configured under REDIS_ALIAS, else 'database'.",
    )
    CELERY_APP = Setting(
        None,
        _optional_text,
        "Celery app as 'module:attribute'; None uses celery.current_app (the project's app).",
    )
    LEASE_TTL = Setting(10.0, _positive_seconds, "Leader lease time-to-live, seconds.")
    RENEW_INTERVAL = Setting(
        None,
        _optional_seconds,
        "How often the leader renews its lease; None means LEASE_TTL / 3.",
        none_means=lambda settings: settings.LEASE_TTL / 3,
    )
    POLL_INTERVAL = Setting(
        1.0, _positive_seconds, "How often a standby tries to take the lease, seconds."
    )
    BATCH_SIZE = Setting(500, _positive_int, "Due jobs planned per database round trip.")
    CATCHUP_POLICY = Setting(
        "latest", _choice("all", "latest", "none"), "Default catch-up policy of new jobs."
    )
    CATCHUP_WINDOW = Setting(
        3600.0, _positive_duration, "Default catch-up window of new jobs, seconds."
    )
    CATCHUP_CAP = Setting(
        10, _positive_int, "Most runs one job gets from one catch-up (policy 'all' and 'none')."
    )
    ON_TIME_GRACE = Setting(
        60.0,
        _non_negative_duration,
        "A slot dispatched within this many seconds counts as on time (trigger 'schedule').",
    )
    MISSED_RECORD_LIMIT = Setting(
        100,
        _non_negative_int,
        "Most 'missed' runs recorded one by one per job and catch-up; older ones are summarised.",
    )
    OVERLAP_POLICY = Setting(
        "allow",
        _choice("allow", "skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other"),
        "Default overlap policy of new jobs.",
    )
    MAX_BUFFERED = Setting(
        1000,
        _positive_int,
        "Default of a job's max_buffered: how many runs of a 'buffer_all' job may wait their "
        "turn; a slot past it is skipped (buffer full).",
    )
    LOOKAHEAD = Setting(
        60.0,
        _non_negative_duration,
        "How long before its due time a run is recorded and its message built, seconds; at the "
        "instant the leader only publishes. 0 records each run when it is due.",
    )
    LOOKAHEAD_RUNS = Setting(
        100_000,
        _non_negative_int,
        "Most runs recorded ahead with their messages held by the leader at once (about 100 "
        "bytes each); beyond it, runs are recorded when due.",
    )
    OUTBOX_REPUBLISH_AFTER = Setting(
        30.0,
        _positive_duration,
        "Re-publish a recorded run no worker picked up after this many seconds.",
    )
    MESSAGE_FORM = Setting(
        "auto",
        _choice("auto", "task", "execute_run"),
        "What a run's message is: 'task' (the job's own task), 'execute_run' (the form workers "
        "before 0.2 run) or 'auto' (the job's task once every worker answering says it can).",
    )
    MESSAGE_FORM_PROBE_INTERVAL = Setting(
        30.0,
        _positive_seconds,
        "With MESSAGE_FORM 'auto': how often the leader asks the workers which form they run.",
    )
    TASK_ALLOWLIST = Setting(
        None,
        _patterns,
        "None, or glob patterns of the Celery task names jobs may use (e.g. ['billing.*']).",
    )
    REDACT_KEYS = Setting(
        DEFAULT_REDACT_KEYS,
        _markers,
        "Parts of argument key names whose values the admin and the API show masked "
        "(lowercase; a key matches when its lowercased name contains one).",
    )
    DEFAULT_QUEUE = Setting(
        None, _optional_text, "Queue for jobs that name none; None uses Celery's routing."
    )
    RUN_RETENTION_DAYS = Setting(
        30,
        _positive_int,
        "Days the ledger keeps a finished run of any final status RUN_RETENTION names no period "
        "for (failed and uncertain runs: at least 90).",
    )
    RUN_RETENTION = Setting(
        {},
        _retention_days,
        "Days kept per final status over RUN_RETENTION_DAYS, e.g. {'skipped': 7, 'failed': 365}; "
        "None keeps a status for ever. A job's own retention goes over it.",
    )
    RUN_KEEP_LAST = Setting(
        10,
        _keep_last,
        "The newest runs of each job and final status kept however old: a number, or per "
        "status, e.g. {'failed': 50}. A job's own keep_last goes over it.",
    )
    PRUNE_RUNS = Setting(
        True,
        _bool,
        "The leader prunes the ledger itself, in bounded passes (at most one a PRUNE_INTERVAL).",
    )
    PRUNE_BATCH_SIZE = Setting(
        10_000, _positive_int, "The most runs one pruning pass of the leader deletes."
    )
    PRUNE_INTERVAL = Setting(
        60.0, _positive_seconds, "Seconds between two pruning passes of the leader, at least."
    )
    SUMMARY_RETENTION_DAYS = Setting(
        365, _positive_int, "Days the daily summaries of jobs' runs are kept."
    )
    RUN_HEARTBEAT_INTERVAL = Setting(
        10.0, _positive_seconds, "How often a worker marks a running run as alive, seconds."
    )
    RUN_LOST_AFTER = Setting(
        60.0,
        _positive_duration,
        "A running run with no heartbeat for this long is declared lost (its worker died).",
    )
    # A dict of job name -> fields when well formed; anything else is reported per entry.
    JOBS = Setting(
        {},
        _jobs,
        "Jobs declared in settings: name -> {'task', 'schedule', 'args', 'kwargs', 'options', "
        "other job fields}; synced by sync_jobs and after migrate.",
    )
    JOBS_VERSION = Setting(
        None,
        _optional_version,
        "A number that grows with each release of your code's job declarations; a sync from "
        "an older release than the last one applied is skipped (rolling deploys).",
    )
    SYNC_JOBS_ON_MIGRATE = Setting(
        True, _bool, "Sync declared jobs to the database after `manage.py migrate`."
    )
    METRICS = Setting(
        True,
        _bool,
        "Collect Prometheus metrics (needs the metrics extra, prometheus_client); False turns "
        "every metric into a no-op.",
    )
    METRICS_JOB_LABEL_LIMIT = Setting(
        100,
        _non_negative_int,
        "Most job names a process labels run durations with; later ones share the label "
        "'_other'. 0 drops the job label.",
    )
    WORKER_METRICS_PORT = Setting(
        None,
        _optional_port,
        "Celery workers serve /metrics on this port (all pool processes added up); None: off.",
    )
    WORKER_METRICS_HOST = Setting(
        "0.0.0.0",
        _text,
        "The address a worker's /metrics listens on ('127.0.0.1': this host only).",
    )
    CLOCK_SKEW_WARNING = Setting(
        1.0,
        _positive_duration,
        "A node whose clock is off the database's by more than this many seconds logs "
        "clock.skew and shows it on the cluster page (it still dispatches on time).",
    )
    HEALTH_TOKEN = Setting(
        None,
        _optional_text,
        "A secret that shows the health view's details (reasons, nodes, epochs) to a caller "
        "sending it as 'Authorization: Bearer <token>'. None: only logged-in users with the "
        "view permission of the cluster status see them; everyone else gets statuses only.",
    )
    HEALTH_CACHE = Setting(
        2.0,
        _non_negative_seconds,
        "Seconds the health view answers from its last report (per process), so that a flood of "
        "probes costs one round of checks and one broker connection per interval. 0: no cache.",
    )
    MONITORS = Setting(
        [],
        _monitors,
        "Cron monitors fed from each run's start and end: a list of sinks, each a dict with "
        "'sink' ('sentry', 'ping' or a dotted path to a class) and its options. Empty: none.",
    )

    def task_allowed(self, name: str) -> bool:
        patterns = self.TASK_ALLOWLIST
        return patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns)


DEFAULTS: dict[str, Setting[Any]] = ClusterCronSettings.declared
"""Each setting's name -> its declaration (default, parser, doc), in the order declared."""

app_settings = ClusterCronSettings()
