"""Cron monitors the team already runs (Sentry Crons, healthchecks.io and the like), fed from the
ledger: a check-in when a run starts and one when it ends, per job (docs/how-to/monitors.md).

The ledger already knows what a monitor wants to know — when a slot's run started, how it ended,
how long it took — so the monitor is fed from the run signals rather than from wrappers around
each task. ``CLUSTER_CRON["MONITORS"]`` lists the sinks (:mod:`.specs`); with it empty,
:func:`install` connects nothing and imports no sink.

* :mod:`.base` — what a sink receives and the class a project's own sink extends;
* :mod:`.crontab` — a job's schedule as a standard crontab, and its monitor slug;
* :mod:`.describe` — a job as a monitor; the jobs that have no crontab;
* :mod:`.feed` — the signal receivers, and what each signal means to a monitor;
* :mod:`.sentry`, :mod:`.pings` — the two sinks shipped.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from ...conf import app_settings
from .base import CheckIn, Monitor, MonitorSink, check_in_id
from .describe import Unmonitorable, unmonitorable_jobs
from .feed import connect, disconnect, flush
from .specs import watches

__all__ = [
    "CheckIn",
    "Monitor",
    "MonitorSink",
    "Unmonitorable",
    "check_in_id",
    "connect",
    "disconnect",
    "flush",
    "install",
    "unmonitorable_jobs",
]


def install() -> None:
    """At start-up (``AppConfig.ready``): with sinks configured, build them — a bad entry fails
    here, naming it — and hear the run signals. With none, do nothing. A setting of the wrong
    shape is left to ``manage.py check`` (``cluster_cron.E002``) and connects nothing."""
    try:
        specs = app_settings.MONITORS
    except ImproperlyConfigured:
        return
    if not specs:
        return
    watches()
    connect()
