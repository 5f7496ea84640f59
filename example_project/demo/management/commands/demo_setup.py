"""`manage.py demo_setup`: a demo superuser and a handful of demo jobs. Safe to run again."""

import os
from datetime import datetime, timezone
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import models, transaction

DEFAULT_PING_URL = "http://127.0.0.1:8000/demo/ping/"
# Set only when the model has them: nice to show, not needed for the demo to work.
OPTIONAL_FIELDS = frozenset({"max_retries", "retry_backoff"})


def demo_jobs(ping_url: str) -> list[dict[str, Any]]:
    """The demo jobs, keyed by their unique `name`. Six-field crons end with a seconds field."""
    return [
        {
            "name": "echo every 5 seconds",
            "cron": "* * * * * */5",
            "timezone": "UTC",
            "task": "demo.echo",
            "args": ["hello from django-cluster-cron"],
            "kwargs": {"source": "demo_setup"},
            "enabled": True,
            # Every slot a failover leaves without a leader runs late (the default, "latest",
            # would run the newest only): the demo's story counts them all.
            "catchup_policy": "all",
            "description": "Logs its arguments in the worker; the quickest way to see runs.",
        },
        {
            "name": "sleep every 10 seconds",
            "cron": "* * * * * */10",
            "timezone": "UTC",
            "task": "demo.sleep",
            "args": [],
            "kwargs": {"seconds": 3},
            "enabled": True,
            "description": "Takes 3 seconds, so runs have a visible duration.",
        },
        {
            "name": "http ping every minute",
            "cron": "* * * * *",
            "timezone": "UTC",
            "task": "demo.http_get",
            "args": [ping_url],
            "kwargs": {},
            "enabled": True,
            "description": "GETs the demo's own /demo/ping/ view and records status and size.",
        },
        {
            "name": "failing job every 30 seconds",
            "cron": "* * * * * */30",
            "timezone": "UTC",
            "task": "demo.always_fails",
            "args": [],
            "kwargs": {},
            "enabled": True,
            "description": "Raises on purpose: shows failed runs, retries and tracebacks.",
            "max_retries": 2,
            "retry_backoff": 5.0,
        },
        {
            "name": "daily report at 09:30 Europe/Berlin",
            "cron": "30 9 * * *",
            "timezone": "Europe/Berlin",
            "task": "demo.echo",
            "args": ["daily report"],
            "kwargs": {},
            "enabled": True,
            "description": "A wall-clock job in a zone with DST: 09:30 Berlin time all year.",
        },
        {
            "name": "echo every 90 seconds",
            "cron": "@every 90s",
            "timezone": "UTC",
            "task": "demo.echo",
            "args": ["an interval of real time"],
            "kwargs": {},
            "enabled": True,
            "description": "An interval: every 90 s of real time, counted from 1970-01-01 UTC.",
        },
        {
            "name": "weekday report, not on Bavarian holidays",
            "cron": "0 8 * * mon-fri",
            "timezone": "Europe/Berlin",
            "exclusions": ["holidays:DE-BY"],
            "task": "demo.echo",
            "args": ["weekday report"],
            "kwargs": {},
            "enabled": True,
            "description": "Exclusions: the preview lists the holidays it skips, and why.",
        },
    ]


class Command(BaseCommand):
    help = (
        "Create (or update) a demo superuser and the demo jobs. Running it again changes "
        "nothing that is already as described."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin", help="Superuser name (default: admin).")
        parser.add_argument("--password", default="admin", help="Its password (default: admin).")
        parser.add_argument("--email", default="admin@example.com")
        parser.add_argument(
            "--ping-url",
            default=os.environ.get("DEMO_PING_URL", DEFAULT_PING_URL),
            help=f"URL for the http ping job (env DEMO_PING_URL; default {DEFAULT_PING_URL}).",
        )
        parser.add_argument("--no-jobs", action="store_true", help="Only create the superuser.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.ensure_superuser(options["username"], options["password"], options["email"])
        if not options["no_jobs"]:
            specs = demo_jobs(options["ping_url"])
            if getattr(settings, "DEMO_TASKS", "celery") == "django":
                # The same jobs on Django's own tasks: demo.echo becomes demo.djtasks.echo.
                for spec in specs:
                    spec["task"] = "demo.djtasks." + spec["task"].removeprefix("demo.")
            self.ensure_jobs(specs)

    def ensure_superuser(self, username: str, password: str, email: str) -> None:
        user_model = get_user_model()
        user, created = user_model._default_manager.get_or_create(
            **{user_model.USERNAME_FIELD: username}, defaults={"email": email}
        )
        changed = created or not (user.is_staff and user.is_superuser and user.is_active)
        user.is_staff = user.is_superuser = user.is_active = True
        if created or not user.check_password(password):
            # Reset it so the credentials printed below are the ones that work.
            user.set_password(password)
            changed = True
        if changed:
            user.save()
        state = "created" if created else ("updated" if changed else "unchanged")
        self.stdout.write(f"Superuser {username!r} / password {password!r} ({state})")

    def ensure_jobs(self, specs: list[dict[str, Any]]) -> None:
        try:
            job_model = apps.get_model("django_cluster_cron", "JobDefinition")
        except LookupError:
            self.stdout.write(
                self.style.WARNING(
                    "django_cluster_cron.JobDefinition is not available in this version of the "
                    "app; skipping the demo jobs (the superuser was still set up)."
                )
            )
            return
        model_fields = {field.name for field in job_model._meta.get_fields()}
        for spec in specs:
            for field_name in list(spec):
                if field_name in model_fields:
                    continue
                if field_name not in OPTIONAL_FIELDS:
                    raise CommandError(
                        f"JobDefinition has no field {field_name!r}; demo_setup needs updating."
                    )
                del spec[field_name]

        # All jobs or none: a job that fails validation leaves the database as it was.
        with transaction.atomic():
            results = [self.ensure_job(job_model, spec) for spec in specs]
        for name, state, job in results:
            self.stdout.write(f"Job {name!r} ({state}): {job.task} at {job.cron!r} {job.timezone}")
            self.write_preview(job)

    def ensure_job(
        self, job_model: type[models.Model], spec: dict[str, Any]
    ) -> tuple[str, str, Any]:
        # update_or_create(name=...) semantics, but validated with full_clean() before the save,
        # so a bad cron, timezone or task name stops here with the model's own message. The
        # base manager also finds a soft-deleted job of the same name (and leaves it deleted).
        name = spec["name"]
        job = job_model._base_manager.filter(name=name).first()
        created = job is None
        if job is None:
            job = job_model(name=name)
        changed = created
        for field_name, value in spec.items():
            if getattr(job, field_name) != value:
                setattr(job, field_name, value)
                changed = True
        if not changed:
            return name, "unchanged", job
        try:
            job.full_clean()
        except ValidationError as exc:
            details = "; ".join(
                f"{field}: {' '.join(messages)}" for field, messages in exc.message_dict.items()
            )
            raise CommandError(f"Demo job {name!r} is invalid: {details}") from exc
        job.save()
        return name, "created" if created else "updated", job

    def write_preview(self, job: Any) -> None:
        schedule = getattr(job, "schedule", None)  # the job's, with its anchor and exclusions
        if schedule is None:
            return
        now = datetime.now(timezone.utc)
        times = schedule.fire_times(now, 2)
        preview = ", ".join(t.strftime("%Y-%m-%d %H:%M:%SZ") for t in times)
        self.stdout.write(f"    next: {preview}")
