"""``manage.py sync_jobs [--dry-run]``: create, update or disable the jobs declared in code."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser

from django_cluster_cron.checks import declarations_reported_by_the_command
from django_cluster_cron.declared.sync import sync
from django_cluster_cron.management.base import ClusterCronCommand


class Command(ClusterCronCommand):
    help = (
        "Bring the database in line with the jobs declared in code (@cron and "
        "CLUSTER_CRON['JOBS']): create new ones, update changed ones, disable removed ones (a "
        "job is taken for removed only when what declared it was read: settings without JOBS "
        "keep the jobs declared there). "
        "An invalid declaration is left out (its job, if synced before, keeps what was synced) "
        "and the others are synced. Exits 1 if a declaration is invalid or conflicts with a job "
        "made in the admin."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Show the plan; change nothing.")

    def check(self, *args: Any, **kwargs: Any) -> None:
        # This command reports each declaration it leaves out, with what became of its job:
        # the checks' W004/W005 would say the same again before it.
        with declarations_reported_by_the_command():
            super().check(*args, **kwargs)

    def handle(self, *args: Any, **options: Any) -> None:
        # Each change is printed below, once: not logged as well.
        result = sync(dry_run=options["dry_run"], by="sync_jobs", log_each=False)
        if result.skipped:
            self.stdout.write(f"Skipped: {result.skipped}.")
        for change in result.changes:
            self.stdout.write(change.line())
        counts = ", ".join(
            f"{result.count(a)} {a}"
            for a in (
                "create",
                "update",
                "disable",
                "enable",
                "unchanged",
                "conflict",
                "invalid",
                "kept",
            )
            if result.count(a)
        )
        verb = "Done" if result.applied else "Would do (dry run)" if not result.skipped else "Plan"
        self.stdout.write(f"{verb}: {counts or 'nothing declared'}.")
        invalid = [change.name for change in result.changes if change.action == "invalid"]
        if invalid:
            # The exit status is what a release pipeline sees: the other jobs were synced, but
            # these declarations do not reach the database until they are fixed.
            self.stderr.write(
                f"{len(invalid)} declaration(s) left out, fix them and sync again: "
                + ", ".join(invalid)
            )
        if result.count("conflict") or invalid:
            sys.exit(1)
