"""Sentry Crons, through the project's own ``sentry_sdk`` client (the ``sentry`` extra).

Every check-in carries the monitor's configuration, so Sentry creates the monitor on the first
one and follows the job's edits with the next: the crontab, its time zone, the check-in margin and
the longest run, in whole minutes rounded up (Sentry's unit; at least 1, at most its 28 days).
Sentry then finds missed slots from the schedule itself, and times out a check-in left
``in_progress`` past ``max_runtime`` — a run whose worker died before the leader declared it lost,
or a run cancelled while running.

The sink does not initialise Sentry: it uses the client your settings or worker start-up made
(``sentry_sdk.init``), with its DSN, environment and release. Without an active client it sends
nothing and says so once per process (``monitors.sentry_inactive``). The SDK queues events for
its own background thread, so a check-in costs the worker no network round trip.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from .base import CheckIn, Monitor, MonitorSink

try:
    import sentry_sdk
    from sentry_sdk.crons import capture_checkin
except ImportError:  # pragma: no cover - the message says what to install
    sentry_sdk = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from datetime import timedelta

    from sentry_sdk._types import MonitorConfig

logger = logging.getLogger("django_cluster_cron.monitors")

# Sentry's bounds for the margin and the longest run, minutes (28 days).
MAX_MINUTES = 40_320


def minutes(duration: timedelta) -> int:
    """Whole minutes, rounded up, within Sentry's bounds."""
    return min(max(math.ceil(duration.total_seconds() / 60), 1), MAX_MINUTES)


def _threshold(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 720:
        raise ValueError(f"{name} must be a whole number from 1 to 720, not {value!r}")
    return value


class SentrySink(MonitorSink):
    """Options: ``failure_issue_threshold`` (failed or missed check-ins in a row before Sentry
    opens an issue: 2 lets one retried failure pass), ``recovery_threshold``, ``owner``
    (``"user:<id>"`` or ``"team:<id>"``)."""

    uses_schedule = True

    def __init__(
        self,
        failure_issue_threshold: int | None = None,
        recovery_threshold: int | None = None,
        owner: str | None = None,
    ) -> None:
        if sentry_sdk is None:
            raise ImproperlyConfigured(
                "The Sentry monitor sink needs sentry-sdk: "
                "pip install 'django-cluster-cron[sentry]'."
            )
        self.extra: dict[str, Any] = {}
        for name, value in (
            ("failure_issue_threshold", failure_issue_threshold),
            ("recovery_threshold", recovery_threshold),
        ):
            if _threshold(name, value) is not None:
                self.extra[name] = value
        if owner is not None:
            if not isinstance(owner, str) or not owner.startswith(("user:", "team:")):
                raise ValueError(f"owner must be 'user:<id>' or 'team:<id>', not {owner!r}")
            self.extra["owner"] = owner
        self._said_inactive = False

    def config(self, monitor: Monitor) -> MonitorConfig | None:
        """What upserts the monitor; None for a job without a schedule a monitor can carry."""
        if monitor.interval is not None:
            count, unit = monitor.interval
            schedule: dict[str, Any] = {"type": "interval", "value": count, "unit": unit}
        elif monitor.crontab is not None:
            schedule = {"type": "crontab", "value": monitor.crontab}
        else:
            return None
        config: dict[str, Any] = {
            "schedule": schedule,
            "timezone": monitor.timezone,
            "checkin_margin": minutes(monitor.margin),
            **self.extra,
        }
        if monitor.max_runtime is not None:
            config["max_runtime"] = minutes(monitor.max_runtime)
        return config  # type: ignore[return-value]

    def started(self, monitor: Monitor, check_in: CheckIn) -> None:
        self._send(monitor, check_in)

    def finished(self, monitor: Monitor, check_in: CheckIn) -> None:
        self._send(monitor, check_in)

    def _send(self, monitor: Monitor, check_in: CheckIn) -> None:
        if not sentry_sdk.get_client().is_active():
            if not self._said_inactive:
                self._said_inactive = True
                logger.warning(
                    "monitors.sentry_inactive: sentry_sdk.init() has not run in this process; "
                    "no check-ins are sent to Sentry"
                )
            return
        duration = check_in.duration
        capture_checkin(
            monitor_slug=monitor.slug,
            check_in_id=check_in.check_in_id,
            status=check_in.status,
            duration=None if duration is None else duration.total_seconds(),
            monitor_config=self.config(monitor),
        )

    def flush(self, timeout: float) -> bool:
        if sentry_sdk.get_client().is_active():
            sentry_sdk.flush(timeout=timeout)
        return True
