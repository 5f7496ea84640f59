"""``manage.py run_scheduler``: parse options, wire signals, hand off to the Scheduler."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from django_cluster_cron.conf import NODE_ID_ENV, app_settings
from django_cluster_cron.dbconn import bound_server_waits_of_this_process
from django_cluster_cron.dispatch import bound_publish_waits
from django_cluster_cron.management.base import ClusterCronCommand, port, seconds_above_zero
from django_cluster_cron.scheduler import build_scheduler, default_node_id

# Health component name -> what the operator is told was unreachable.
_COMPONENTS = {
    "redis": "Redis (the lease, via django-redis)",
    "db": "the database (and the lease, with the database lease)",
    "broker": "the Celery broker",
}


class Command(ClusterCronCommand):
    checks_survive_database_down = True

    help = (
        "Run a cluster-cron scheduler node. Start one on as many hosts as you like: one leads "
        "(a lease in Redis or the database, LEASE_BACKEND), the others stand by and take over "
        "within the lease TTL."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--node-id",
            help=f"Name of this node in logs and the run ledger (default: ${NODE_ID_ENV}, "
            "else hostname:pid).",
        )
        parser.add_argument(
            "--lease-ttl",
            type=seconds_above_zero,
            metavar="SECONDS",
            help="How long the leader's lease lasts without renewal; a standby takes over at "
            "most this long after the leader dies "
            f"(default: LEASE_TTL, now {app_settings.LEASE_TTL:g}).",
        )
        parser.add_argument(
            "--poll-interval",
            type=seconds_above_zero,
            metavar="SECONDS",
            help="How often a standby tries to take the lease "
            f"(default: POLL_INTERVAL, now {app_settings.POLL_INTERVAL:g}).",
        )
        parser.add_argument(
            "--log-level",
            default="INFO",
            choices=["DEBUG", "INFO", "WARNING", "ERROR"],
            help="Level of the django_cluster_cron loggers (default INFO).",
        )
        parser.add_argument(
            "--health-port",
            type=port,
            metavar="PORT",
            help="Serve /livez, /readyz and /healthz (JSON) on this port for probes "
            "(0 picks a free one, logged as health.listening; default: none served).",
        )
        parser.add_argument(
            "--health-host",
            default="0.0.0.0",
            metavar="ADDRESS",
            help="Address the health and metrics endpoints listen on (default 0.0.0.0).",
        )
        parser.add_argument(
            "--metrics-port",
            type=port,
            metavar="PORT",
            help="Serve Prometheus metrics at /metrics on this port (needs the metrics extra; "
            "0 picks a free one, logged as metrics.listening; default: none served).",
        )
        parser.add_argument(
            "--once",
            action="store_true",
            help="One tick: dispatch what is due if this node can lead, then exit (default: run "
            "until SIGTERM or Ctrl-C).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        _configure_logging(options["log_level"])
        ttl = options["lease_ttl"] or app_settings.LEASE_TTL
        poll = options["poll_interval"] or app_settings.POLL_INTERVAL
        renew = min(app_settings.RENEW_INTERVAL, ttl / 3)
        if poll >= ttl:
            raise CommandError(
                f"--poll-interval ({poll:g}s) must be below the lease TTL ({ttl:g}s)."
            )
        missing = _unapplied_migrations()
        if missing:
            # Without this the first tick fails on a missing table or column and is reported as
            # "database down", which sends the operator looking in the wrong place.
            raise CommandError(
                f"The database lacks {len(missing)} migration(s) this version needs "
                f"({', '.join(missing)}); run `manage.py migrate` first."
            )
        # The scheduler publishes: bound its waits on a silent broker link (options the project
        # sets are kept).
        bound_publish_waits()
        # And the database's server: a leader cut off inside a transaction must not hold the
        # leader row's lock (which the next leader's epoch bump waits for) until the link heals.
        bound_server_waits_of_this_process()
        stop = threading.Event()
        scheduler = build_scheduler(
            node_id=options["node_id"] or default_node_id(),
            ttl=ttl,
            poll_interval=poll,
            renew_interval=renew,
            stop=stop,
        )
        if options["once"]:
            led = scheduler.run_once()
            # The scheduler survives outages by design (it logs and backs off), so one tick
            # "succeeds" even when nothing could be done. A cron-style caller only sees the exit
            # status: report every dependency that was unreachable and exit 1.
            down = [name for name in _COMPONENTS if scheduler.health.is_down(name)]
            if down:
                names = ", ".join(_COMPONENTS[name] for name in down)
                self.stderr.write(f"run_scheduler --once failed: unavailable: {names}.")
                sys.exit(1)
            if not led:
                self.stdout.write("Another node holds the lease; nothing done.")
            return

        from django_cluster_cron.ops.probe import ProbeServer, sd_notify

        probe = None
        if options["health_port"] is not None:
            try:
                probe = ProbeServer(
                    scheduler, options["health_host"], options["health_port"]
                ).start()
            except OSError as exc:
                raise CommandError(
                    f"--health-port {options['health_port']}: cannot listen on "
                    f"{options['health_host']}: {exc}"
                ) from exc
        if options["metrics_port"] is not None:
            from django_cluster_cron.ops import metrics

            if not metrics.enabled():
                raise CommandError(
                    "--metrics-port needs prometheus_client (pip install "
                    "'django-cluster-cron[metrics]') and CLUSTER_CRON['METRICS'] left True."
                )
            try:
                metrics.serve(options["metrics_port"], options["health_host"])
            except OSError as exc:
                raise CommandError(f"--metrics-port {options['metrics_port']}: {exc}") from exc
        # Under systemd (Type=notify, WatchdogSec=): ready now, and a watchdog ping per pass.
        sd_notify("READY=1")
        if os.environ.get("WATCHDOG_USEC"):
            scheduler.after_pass = lambda: sd_notify("WATCHDOG=1")

        def request_stop(signum: int, frame: Any) -> None:
            logging.getLogger("django_cluster_cron.scheduler").info(
                "scheduler.stopping signal=%s", signal.Signals(signum).name
            )
            stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        try:
            scheduler.run()
        finally:
            if probe is not None:
                probe.stop()


def _unapplied_migrations() -> list[str]:
    """Migrations of this app (and what they depend on) not yet applied; [] if the database
    cannot be reached now: the scheduler's own outage handling waits for it."""
    try:
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        targets = [
            key for key in executor.loader.graph.leaf_nodes() if key[0] == "django_cluster_cron"
        ]
        plan = executor.migration_plan(targets)
    except DatabaseError:
        return []
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


def _configure_logging(level: str) -> None:
    logger = logging.getLogger("django_cluster_cron")
    logger.setLevel(level)
    if not logging.getLogger().handlers and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s")
        )
        logger.addHandler(handler)
