"""``manage.py import_celery_beat``: turn django-celery-beat's periodic tasks into jobs, or a
project's ``CELERY_BEAT_SCHEDULE`` into jobs declared in code (``--from-settings``).

Dry-run first (the default): it lists what it would create and what it skips, and why. Crontab
schedules map one to one; interval schedules map when the interval divides the minute, hour or
day (the phase then follows the clock, not the moment beat started); solar, clocked and one-off
tasks have no cron equivalent and are skipped. Every job is validated like an admin entry.
"""

from __future__ import annotations

import json
import pprint
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.db import transaction

from django_cluster_cron import audit
from django_cluster_cron.celery_app import private_task_reason
from django_cluster_cron.management.base import ClusterCronCommand
from django_cluster_cron.models import JobDefinition


def _interval_cron(period: str, every: int) -> str | None:
    """The cron expression of "every N <period>" when N divides the next unit up, else None."""
    step = "*" if every == 1 else f"*/{every}"
    if period == "seconds" and 60 % every == 0:
        return f"* * * * * {step}"
    if period == "minutes" and 60 % every == 0:
        return f"{step} * * * *"
    if period == "hours" and 24 % every == 0:
        return f"0 {step} * * *"
    if period == "days" and every == 1:
        return "0 0 * * *"
    return None


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
        tasks = periodic_task.objects.select_related("crontab", "interval").order_by("name")
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
        for name, entry in sorted(schedule.items()):
            declared, reason = _declaration(str(name), entry)
            if declared is None:
                self.stdout.write(f"skip    {name}: {reason}")
                continue
            jobs[str(name)] = declared
            self.stdout.write(
                f"declare {name}: '{declared['schedule']}' -> {declared['task']}"
                + (f" [{reason}]" if reason else "")
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
        if task.one_off:
            return Mapping(name, None, "one-off task: use Run now or a backfill instead")
        note = ""
        if task.crontab is not None:
            c = task.crontab
            cron = f"{c.minute} {c.hour} {c.day_of_month} {c.month_of_year} {c.day_of_week}"
            zone = str(c.timezone)
        elif task.interval is not None:
            every, period = task.interval.every, task.interval.period
            interval_cron = _interval_cron(period, every) if every >= 1 else None
            if interval_cron is None:
                return Mapping(
                    name,
                    None,
                    f"every {every} {period} has no cron equivalent (it must divide "
                    "a minute, an hour or a day)",
                )
            cron, zone = interval_cron, "UTC"
            note = "interval now aligned to the clock"
        else:
            return Mapping(name, None, "solar and clocked schedules have no cron equivalent")
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
        )
        try:
            job.full_clean()
        except ValidationError as exc:
            problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            return Mapping(name, None, f"not valid here: {problems}")
        return Mapping(name, job, note)


def _declaration(name: str, entry: Any) -> tuple[dict[str, Any] | None, str]:
    """A CELERY_BEAT_SCHEDULE entry as a CLUSTER_CRON["JOBS"] entry, or None and why not."""
    from datetime import timedelta

    from django_cluster_cron.declared import Declaration, DeclarationError
    from django_cluster_cron.declared.reading import schedule_text

    if not isinstance(entry, dict) or "task" not in entry or "schedule" not in entry:
        return None, "not a dict with 'task' and 'schedule'"
    task = str(entry["task"])
    if task.startswith("celery."):
        return None, "Celery's own maintenance task; not imported"
    private = private_task_reason(task)
    if private:
        return None, private
    raw, note = entry["schedule"], ""
    seconds = raw.total_seconds() if isinstance(raw, timedelta) else raw
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        every = int(seconds)
        cron = _interval_cron("seconds", every) if every == seconds and every >= 1 else None
        if cron is None and every % 60 == 0 and every >= 60:
            cron = _interval_cron("minutes", every // 60) or (
                _interval_cron("hours", every // 3600) if every % 3600 == 0 else None
            )
        if cron is None:
            return (
                None,
                f"every {seconds:g} s has no cron equivalent (it must divide a minute, an hour "
                "or a day)",
            )
        note = "interval now aligned to the clock"
    else:
        try:
            cron = schedule_text(raw)
        except DeclarationError:
            return None, f"a {type(raw).__name__} schedule has no cron equivalent"
    declared: dict[str, Any] = {"task": task, "schedule": cron}
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
