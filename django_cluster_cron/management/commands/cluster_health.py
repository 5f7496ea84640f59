"""``manage.py cluster_health``: is the cluster healthy? A line per check; exit 0 if so, else 1."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import CommandParser

from django_cluster_cron.management.base import ClusterCronCommand
from django_cluster_cron.ops.health import FAIL, WARN, cluster_health


class Command(ClusterCronCommand):
    checks_survive_database_down = True

    help = (
        "Check the cluster from outside: a leader holds the lease, it ticks, slots go out on "
        "time, runs do not wait or hang, clocks agree, the broker answers. Prints one line per "
        "check and exits 0 when no check fails, 1 otherwise."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
        parser.add_argument(
            "--no-broker", action="store_true", help="Do not connect to the Celery broker."
        )
        parser.add_argument(
            "--strict", action="store_true", help="Exit 1 on warnings too, not only on failures."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = cluster_health(broker=not options["no_broker"])
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        else:
            for line in report.lines():
                self.stdout.write(line)
            self.stdout.write(f"cluster: {'healthy' if report.healthy else 'NOT healthy'}")
        failing = {FAIL, WARN} if options["strict"] else {FAIL}
        if any(check.status in failing for check in report.checks):
            sys.exit(1)
