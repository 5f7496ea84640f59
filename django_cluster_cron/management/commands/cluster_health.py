"""``manage.py cluster_health``: is the cluster healthy? A line per check; exit 0 if so, else 1."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import CommandParser

from django_cluster_cron.management.base import ClusterCronCommand
from django_cluster_cron.ops.health import WARN, cluster_health


class Command(ClusterCronCommand):
    checks_survive_database_down = True

    help = (
        "Check the cluster from outside: a leader holds the lease, it ticks, slots go out on "
        "time, runs do not wait or hang, clocks agree, the broker answers (when a job runs on "
        "Celery). Prints one line per check and exits 0 when no check fails, 1 otherwise."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
        parser.add_argument(
            "--no-broker", action="store_true", help="Do not connect to the Celery broker."
        )
        parser.add_argument(
            "--strict",
            action="store_true",
            help="Count warnings as failures: exit 1, and say NOT healthy, on a warning too.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = cluster_health(broker=not options["no_broker"])
        strict = options["strict"]
        warnings = sum(1 for check in report.checks if check.status == WARN)
        # Under --strict a warning fails the cluster: the verdict says so, as the exit status does.
        healthy = report.healthy and not (strict and warnings)
        if options["json"]:
            document = report.as_dict()
            if strict:
                document.update(healthy=healthy, strict=True)
            self.stdout.write(json.dumps(document, indent=2))
        else:
            for line in report.lines():
                self.stdout.write(line)
            self.stdout.write(f"cluster: {verdict(report.healthy, healthy, warnings)}")
        if not healthy:
            sys.exit(1)


def verdict(without_strict: bool, healthy: bool, warnings: int) -> str:
    counted = f"{warnings} warning{'s' if warnings != 1 else ''}"
    if healthy:
        return f"healthy, with {counted}" if warnings else "healthy"
    if without_strict:  # only --strict fails it
        return f"NOT healthy (--strict: {counted})"
    return "NOT healthy"
