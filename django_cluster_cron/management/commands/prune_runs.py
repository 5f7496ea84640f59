"""``manage.py prune_runs``: prune the ledger now, by the retention the leader prunes by (or the
operator's ``--days``/``--keep-last``), in batches, with progress, a dry run and an archive."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from contextlib import ExitStack
from datetime import datetime, timedelta
from typing import IO, Any

from django.core.management.base import CommandError, CommandParser
from django.core.serializers.json import DjangoJSONEncoder
from django.db import Error
from django.utils import timezone

from django_cluster_cron.conf import app_settings
from django_cluster_cron.ledger import retention
from django_cluster_cron.management.base import ClusterCronCommand, whole_number
from django_cluster_cron.models import JobChange

BAR_WIDTH = 30


class Command(ClusterCronCommand):
    help = (
        "Delete the finished runs past their retention (RUN_RETENTION_DAYS, RUN_RETENTION, "
        "RUN_KEEP_LAST and each job's own), each day summed up first; runs still waiting or "
        "running are kept. The leader does the same in bounded passes unless PRUNE_RUNS is "
        "False."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days",
            type=whole_number(0),
            help="Keep this many days of finished runs of every status and job, over the "
            "configured periods (0 prunes every finished run but the newest kept).",
        )
        parser.add_argument(
            "--keep-last",
            type=whole_number(0),
            help="Keep the newest N runs of each job and status however old, over the "
            "configured counts.",
        )
        parser.add_argument(
            "--batch-size",
            type=whole_number(1),
            default=None,
            help=f"Runs deleted per transaction (default PRUNE_BATCH_SIZE, now "
            f"{app_settings.PRUNE_BATCH_SIZE:,}).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Only count what would go, by status."
        )
        parser.add_argument(
            "--archive",
            metavar="FILE",
            help="Before deleting, write each run to FILE as gzip-compressed JSON lines (one "
            "object of the run's columns per line; appended to if FILE exists).",
        )
        parser.add_argument("--no-progress", action="store_true", help="No progress bar.")
        parser.add_argument(
            "--history-days",
            type=whole_number(0),
            help="Also delete jobs' history (audit) entries older than this many days; kept "
            "forever unless given.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        days, keep_last = options["days"], options["keep_last"]
        batch_size = options["batch_size"] or app_settings.PRUNE_BATCH_SIZE
        history_days = options["history_days"]
        if history_days is not None:
            self._prune_history(now - timedelta(days=history_days), options["dry_run"])
        if options["dry_run"]:
            counts = self._count(now, days, keep_last)
            shown = ", ".join(f"{n:,} {s}" for s, n in sorted(counts.items()) if n) or "none"
            self.stdout.write(f"{sum(counts.values()):,} runs would be deleted: {shown}.")
            return
        total = 0 if options["no_progress"] else sum(self._count(now, days, keep_last).values())
        with ExitStack() as stack:
            archive: IO[str] | None = None
            if options["archive"]:
                try:
                    archive = stack.enter_context(
                        gzip.open(options["archive"], "at", encoding="utf-8")
                    )
                except OSError as exc:
                    raise CommandError(
                        f"--archive: cannot write {options['archive']}: {exc}"
                    ) from exc
            done = self._prune(now, days, keep_last, batch_size, archive, total)
        if not options["no_progress"] and total:
            self.stdout.write("")
        shown = ", ".join(f"{n:,} {s}" for s, n in sorted(done.by_status.items()))
        self.stdout.write(
            self.style.SUCCESS(
                f"Deleted {done.runs:,} runs" + (f" ({shown})" if shown else "") + "; "
                f"{done.summaries:,} daily summaries written, "
                f"{done.summaries_dropped:,} past SUMMARY_RETENTION_DAYS deleted."
            )
        )

    def _prune(
        self,
        now: datetime,
        days: int | None,
        keep_last: int | None,
        batch_size: int,
        archive: IO[str] | None,
        total: int,
    ) -> retention.Pruned:
        """Passes until one finds fewer than a batch; a failed one stops the command."""
        done = retention.Pruned()
        while True:
            try:
                pruned = retention.prune(
                    now=now,
                    limit=batch_size,
                    days=days,
                    keep_last=keep_last,
                    archive=None if archive is None else _writer(archive),
                )
            except (Error, OSError) as exc:
                if total:
                    self.stdout.write("")
                raise CommandError(
                    f"A batch failed after {done.runs:,} runs were deleted; it was rolled back "
                    f"(runs it archived are still in the ledger): {type(exc).__name__}: {exc}"
                ) from exc
            done.add(pruned)
            if total:
                self._progress(done.runs, total)
            if not pruned.full:
                return done

    @staticmethod
    def _count(now: datetime, days: int | None, keep_last: int | None) -> Counter[str]:
        counts: Counter[str] = Counter()
        for group in retention.groups(days=days, keep_last=keep_last):
            counts[group.status] += group.runs(now).count()
        return counts

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


def _writer(archive: IO[str]) -> Any:
    def write(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            archive.write(json.dumps(row, cls=DjangoJSONEncoder, ensure_ascii=False) + "\n")
        archive.flush()

    return write
