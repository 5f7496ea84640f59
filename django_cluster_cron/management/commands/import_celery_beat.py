"""``manage.py import_celery_beat``: turn django-celery-beat's periodic tasks into jobs, or a
project's ``CELERY_BEAT_SCHEDULE`` into jobs declared in code (``--from-settings``).

Dry-run first (the default): it lists what it would create and what it skips, and why. Crontab
schedules map one to one; an interval becomes ``@every`` counted from the moment beat last ran
it (else its start time, else the moment it was last changed, as beat counts), so the cadence
the team sees goes on; a clocked task becomes ``@at``; a one-off crontab or interval task
becomes its schedule with ``max_runs`` 1; a start time and an expiry carry over as the job's
start and end; a solar schedule becomes ``@solar`` (the same events, by the same library). Every
job is validated like an admin entry.
"""

from __future__ import annotations

import json
import pprint
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from django_cluster_cron import audit
from django_cluster_cron.celery_app import private_task_reason
from django_cluster_cron.core.interval import format_duration
from django_cluster_cron.declared.reading import celery_zone, is_crontab, schedule_text
from django_cluster_cron.management.base import ClusterCronCommand
from django_cluster_cron.models import JobDefinition

PERIODS = {"days", "hours", "minutes", "seconds", "microseconds"}
UTC = dt_timezone.utc


def every_text(every: timedelta) -> str | None:
    """``@every <duration>`` for a whole number of seconds, at least one; else None."""
    if every < timedelta(seconds=1) or every % timedelta(seconds=1):
        return None
    return f"@every {format_duration(every)}"


def _utc_text(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%dT%H:%M:%S}Z"


@dataclass
class Mapping:
    name: str
    job: JobDefinition | None
    reason: str = ""


class Command(ClusterCronCommand):
    help = (
        "Import django-celery-beat periodic tasks as cluster-cron jobs. Shows what it would do "
        "unless --apply is given."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--apply", action="store_true", help="Create the jobs (default: dry run)."
        )
        parser.add_argument(
            "--from-settings",
            action="store_true",
            help="Read settings.CELERY_BEAT_SCHEDULE instead and print the equivalent "
            "CLUSTER_CRON['JOBS'] to paste into your settings (jobs declared in code).",
        )
        parser.add_argument(
            "--disable-imported",
            action="store_true",
            help="With --apply: disable each imported periodic task in django-celery-beat, so "
            "beat and cluster-cron do not both run it.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["from_settings"]:
            self.from_settings()
            return
        if not apps.is_installed("django_celery_beat"):
            raise CommandError(
                "django-celery-beat is not installed here: add 'django_celery_beat' to "
                "INSTALLED_APPS (next to django_cluster_cron) to import its periodic tasks."
            )
        periodic_task = apps.get_model("django_celery_beat", "PeriodicTask")
        tasks = periodic_task.objects.select_related(
            "crontab", "interval", "clocked", "solar"
        ).order_by("name")
        mappings = [self.map(task) for task in tasks]
        created = 0
        with transaction.atomic():
            for mapping in mappings:
                if mapping.job is None:
                    self.stdout.write(f"skip    {mapping.name}: {mapping.reason}")
                    continue
                job = mapping.job
                self.stdout.write(
                    f"{'create ' if options['apply'] else 'would create'} {mapping.name}: "
                    f"'{job.cron}' in {job.timezone} -> {job.task}"
                    + ("" if job.enabled else " (disabled)")
                    + (f" [{mapping.reason}]" if mapping.reason else "")
                )
                if options["apply"]:
                    with audit.acting(
                        "import_celery_beat",
                        via="import",
                        note=f"from django-celery-beat's periodic task {mapping.name!r}",
                    ):
                        job.save()
                    created += 1
                    if options["disable_imported"]:
                        periodic_task.objects.filter(name=mapping.name).update(enabled=False)
        skipped = sum(1 for m in mappings if m.job is None)
        verb = "Created" if options["apply"] else "Would create"
        self.stdout.write(
            self.style.SUCCESS(f"{verb} {len(mappings) - skipped} job(s); skipped {skipped}.")
        )
        if not options["apply"] and len(mappings) > skipped:
            self.stdout.write("Run again with --apply (and --disable-imported) to import.")

    def from_settings(self) -> None:
        from django.conf import settings

        schedule = getattr(settings, "CELERY_BEAT_SCHEDULE", None) or {}
        if not isinstance(schedule, dict) or not schedule:
            raise CommandError("settings.CELERY_BEAT_SCHEDULE is empty or not a dict.")
        jobs: dict[str, dict[str, Any]] = {}
        zones: set[tuple[str, str]] = set()
        for name, entry in sorted(schedule.items()):
            declared, reason = _declaration(str(name), entry)
            if declared is None:
                self.stdout.write(f"skip    {name}: {reason}")
                continue
            jobs[str(name)] = declared
            if is_crontab(entry["schedule"]):
                zones.add(celery_zone(entry["schedule"]))
            zone = f" in {declared['timezone']}" if "timezone" in declared else ""
            self.stdout.write(
                f"declare {name}: '{declared['schedule']}'{zone} -> {declared['task']}"
                + (f" [{reason}]" if reason else "")
            )
        for zone, source in sorted(zones):
            # Beat runs a crontab() in the Celery app's zone: the job keeps that zone.
            self.stdout.write(
                f"A crontab() is read in {zone}, the zone Celery runs it in ({source})."
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"{len(jobs)} job(s) to declare; skipped {len(schedule) - len(jobs)}. Paste into "
                "settings (and remove them from CELERY_BEAT_SCHEDULE):"
            )
        )
        self.stdout.write('CLUSTER_CRON["JOBS"] = ' + pprint.pformat(jobs, sort_dicts=False))

    def map(self, task: Any) -> Mapping:
        name = task.name
        if task.task.startswith("celery."):
            return Mapping(name, None, "Celery's own maintenance task; not imported")
        private = private_task_reason(task.task)
        if private:
            return Mapping(name, None, private)
        now = timezone.now()
        notes: list[str] = []
        start_at, end_at, max_runs = task.start_time, task.expires, None
        if task.crontab is not None:
            c = task.crontab
            cron = f"{c.minute} {c.hour} {c.day_of_month} {c.month_of_year} {c.day_of_week}"
            zone = str(c.timezone)
        elif task.interval is not None:
            every, period = task.interval.every, task.interval.period
            text = (
                every_text(timedelta(**{period: every}))
                if period in PERIODS and every >= 1
                else None
            )
            if text is None:
                return Mapping(
                    name,
                    None,
                    f"every {every} {period}: intervals here are whole seconds, at least 1",
                )
            cron, zone = text, "UTC"
            # Beat counts the next run from the last one (else from the start time, else from
            # the last change): the interval counts from there, so the cadence goes on.
            if task.start_time is not None and task.start_time > now:
                anchor, source = task.start_time, "its start time"
            elif task.last_run_at is not None:
                anchor, source = task.last_run_at, "its last run"
            elif task.start_time is not None:
                anchor, source = task.start_time, "its start time"
            else:
                anchor, source = task.date_changed or now, "its last change"
            start_at = anchor = anchor.replace(microsecond=0)  # slots are whole seconds
            notes.append(f"counted from {source}, {_utc_text(anchor)}")
        elif task.clocked is not None:
            when = task.clocked.clocked_time
            if when <= now:
                if task.enabled and not task.total_run_count:
                    return Mapping(
                        name,
                        None,
                        f"clocked at {_utc_text(when)}, which has passed (beat would run it at "
                        "once): use Run now if it should still run",
                    )
                return Mapping(name, None, f"clocked at {_utc_text(when)}: it has run")
            cron, zone = f"@at {_utc_text(when)}", "UTC"
            if when.microsecond:
                notes.append("its time rounded down to the second")
            if task.start_time is not None and task.start_time <= when:
                start_at = None
        elif task.solar is not None:
            s = task.solar
            cron, zone = (
                f"@solar {s.event} {s.latitude.normalize()} {s.longitude.normalize()}",
                "UTC",
            )
        else:
            return Mapping(name, None, "no schedule")
        if task.one_off and task.clocked is None:
            if task.total_run_count:
                return Mapping(name, None, "one-off task that has run")
            max_runs = 1
            notes.append("one-off: max_runs 1")
        if task.expires is not None:
            notes.append(f"expires {_utc_text(task.expires)}: the job's end")
        note = "; ".join(notes)
        if JobDefinition.objects.filter(name=name).exists():
            return Mapping(name, None, "a job with this name already exists")
        try:
            args, kwargs = json.loads(task.args or "[]"), json.loads(task.kwargs or "{}")
        except ValueError as exc:
            return Mapping(name, None, f"args/kwargs are not JSON: {exc}")
        job = JobDefinition(
            name=name,
            description=task.description or "",
            cron=cron,
            timezone=zone,
            task=task.task,
            args=args,
            kwargs=kwargs,
            enabled=task.enabled,
            queue=task.queue or "",
            priority=task.priority,
            expires=task.expire_seconds,
            start_at=start_at,
            end_at=end_at,
            max_runs=max_runs,
        )
        try:
            job.full_clean()
        except ValidationError as exc:
            problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            return Mapping(name, None, f"not valid here: {problems}")
        return Mapping(name, job, note)


def _declaration(name: str, entry: Any) -> tuple[dict[str, Any] | None, str]:
    """A CELERY_BEAT_SCHEDULE entry as a CLUSTER_CRON["JOBS"] entry, or None and why not."""
    from django_cluster_cron.declared import Declaration, DeclarationError

    if not isinstance(entry, dict) or "task" not in entry or "schedule" not in entry:
        return None, "not a dict with 'task' and 'schedule'"
    task = str(entry["task"])
    if task.startswith("celery."):
        return None, "Celery's own maintenance task; not imported"
    private = private_task_reason(task)
    if private:
        return None, private
    raw, note = entry["schedule"], ""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raw = timedelta(seconds=raw)
    try:
        cron = schedule_text(raw)
    except DeclarationError as exc:
        return None, f"a {type(raw).__name__} schedule: {exc.message}"
    if cron.startswith("@every"):
        note = "interval counted from 1970-01-01T00:00:00Z"
    declared: dict[str, Any] = {"task": task, "schedule": cron}
    if is_crontab(raw):
        declared["timezone"] = celery_zone(raw)[0]
    if entry.get("args"):
        declared["args"] = list(entry["args"])
    if entry.get("kwargs"):
        declared["kwargs"] = dict(entry["kwargs"])
    options = {
        k: v
        for k, v in (entry.get("options") or {}).items()
        if k in ("queue", "priority", "expires")
    }
    dropped = sorted(set(entry.get("options") or {}) - set(options))
    if options:
        declared["options"] = options
    if dropped:
        note = "; ".join(filter(None, [note, f"options not carried over: {', '.join(dropped)}"]))
    values = {
        "cron": cron,
        "timezone": declared.get("timezone", "UTC"),
        "task": task,
        "args": declared.get("args", []),
        "kwargs": declared.get("kwargs", {}),
        **options,
    }
    problems = Declaration(name=name, origin="CELERY_BEAT_SCHEDULE", values=values).errors()
    if problems:
        text = "; ".join(f"{k}: {' '.join(v)}" for k, v in sorted(problems.items()))
        return None, f"not valid here: {text}"
    return declared, note
