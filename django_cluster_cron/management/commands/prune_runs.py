"""``manage.py prune_runs``: delete runs older than the retention, in batches, with progress."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from django_cluster_cron.conf import app_settings
from django_cluster_cron.management.base import ClusterCronCommand, whole_number
from django_cluster_cron.models import ACTIVE_STATUSES, JobChange, JobRun

BAR_WIDTH = 30


class Command(ClusterCronCommand):
    help = (
        "Delete finished runs whose slot is older than CLUSTER_CRON['RUN_RETENTION_DAYS'] "
        "(or --days). Runs still waiting or running are kept."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days",
            type=whole_number(0),
            help="Keep this many days of finished runs "
            f"(default: RUN_RETENTION_DAYS, now {app_settings.RUN_RETENTION_DAYS}).",
        )
        parser.add_argument(
            "--batch-size",
            type=whole_number(1),
            default=5000,
            help="Runs deleted per statement (default 5000).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Only count what would go.")
        parser.add_argument("--no-progress", action="store_true", help="No progress bar.")
        parser.add_argument(
            "--history-days",
            type=whole_number(0),
            help="Also delete jobs' history (audit) entries older than this many days; kept "
            "forever unless given.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"] if options["days"] is not None else app_settings.RUN_RETENTION_DAYS
        if days < 0:
            raise CommandError("--days must be 0 or more.")
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1.")
        history_days = options["history_days"]
        if history_days is not None and history_days < 0:
            raise CommandError("--history-days must be 0 or more.")
        cutoff = timezone.now() - timedelta(days=days)
        old = JobRun.objects.filter(scheduled_for__lt=cutoff).exclude(status__in=ACTIVE_STATUSES)
        total = old.count()
        if history_days is not None:
            self._prune_history(timezone.now() - timedelta(days=history_days), options["dry_run"])
        if options["dry_run"]:
            self.stdout.write(
                f"{total:,} runs older than {cutoff:%Y-%m-%d %H:%M}Z would be deleted."
            )
            return
        deleted = 0
        while True:
            batch = list(old.order_by("pk").values_list("pk", flat=True)[: options["batch_size"]])
            if not batch:
                break
            # Runs only: a run's pieces go with it, and are not counted as runs.
            _, by_model = JobRun.objects.filter(pk__in=batch).delete()
            deleted += by_model.get(JobRun._meta.label, 0)
            if not options["no_progress"]:
                self._progress(deleted, total)
        if not options["no_progress"] and total:
            self.stdout.write("")
        self.stdout.write(
            self.style.SUCCESS(f"Deleted {deleted:,} runs older than {cutoff:%Y-%m-%d %H:%M}Z.")
        )

    def _prune_history(self, cutoff: datetime, dry_run: bool) -> None:
        old = JobChange.objects.filter(at__lt=cutoff)
        if dry_run:
            count = old.count()
            self.stdout.write(
                f"{count:,} history entries older than {cutoff:%Y-%m-%d %H:%M}Z would be deleted."
            )
            return
        count = old.delete()[0]
        self.stdout.write(f"Deleted {count:,} history entries older than {cutoff:%Y-%m-%d %H:%M}Z.")

    def _progress(self, done: int, total: int) -> None:
        share = min(1.0, done / total) if total else 1.0
        filled = round(BAR_WIDTH * share)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        self.stdout.write(f"\r[{bar}] {share:4.0%} {done:,}/{total:,}", ending="")
        self.stdout.flush()
