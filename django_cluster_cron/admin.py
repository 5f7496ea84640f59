"""Admin, first cut: jobs with validation and an upcoming-runs preview; the run ledger read-only.

The control-room features (actions, run strips, cluster status) build on this.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .celery_app import registered_task_names
from .core.errors import ScheduleError
from .core.timezones import available_timezones
from .models import JobDefinition, JobRun

PREVIEW_COUNT = 10


def _task_choices(current: str | None) -> list[tuple[str, str]]:
    try:
        names = registered_task_names()
    except ImproperlyConfigured:
        names = []
    from .conf import app_settings

    choices = [(n, n) for n in names if app_settings.task_allowed(n)]
    if current and current not in dict(choices):
        # Keep an unknown stored value visible; the model's clean() explains what is wrong.
        choices.insert(0, (current, f"{current} (not registered)"))
    return [("", "---------"), *choices]


def _help_text(field: str) -> str:
    return str(getattr(JobDefinition._meta.get_field(field), "help_text", ""))


def _timezone_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(available_timezones())]


class JobDefinitionForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = JobDefinition
        fields = (
            "name",
            "description",
            "enabled",
            "cron",
            "timezone",
            "task",
            "args",
            "kwargs",
            "queue",
            "priority",
            "expires",
            "catchup_policy",
            "catchup_window",
            "overlap_policy",
            "max_retries",
            "retry_backoff",
            "retry_backoff_max",
            "on_worker_lost",
            "soft_time_limit",
            "time_limit",
        )
        widgets = {  # noqa: RUF012
            "args": forms.Textarea(attrs={"rows": 2, "cols": 60}),
            "kwargs": forms.Textarea(attrs={"rows": 3, "cols": 60}),
            "description": forms.Textarea(attrs={"rows": 2, "cols": 60}),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        current_task = self.instance.task if self.instance else None
        self.fields["task"] = forms.ChoiceField(
            choices=_task_choices(self.data.get("task") or current_task),
            help_text=_help_text("task"),
        )
        self.fields["timezone"] = forms.ChoiceField(
            choices=_timezone_choices()
            + ([] if not self.data.get("timezone") else [(self.data["timezone"],) * 2]),
            initial="UTC",
            help_text=_help_text("timezone"),
        )


@admin.register(JobDefinition)
class JobDefinitionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = JobDefinitionForm
    list_display = (
        "name",
        "cron",
        "timezone",
        "task",
        "enabled",
        "next_run_local",
        "catchup_policy",
        "overlap_policy",
    )
    list_filter = ("enabled", "catchup_policy", "overlap_policy", "task")
    search_fields = ("name", "task", "description")
    readonly_fields = (
        "upcoming",
        "next_run_at",
        "last_scheduled_at",
        "created_at",
        "updated_at",
        "deleted_at",
    )
    fieldsets = (
        (None, {"fields": ("name", "description", "enabled")}),
        ("Schedule", {"fields": ("cron", "timezone", "upcoming")}),
        ("Task", {"fields": ("task", "args", "kwargs", "queue", "priority", "expires")}),
        (
            "Policies",
            {"fields": ("catchup_policy", "catchup_window", "overlap_policy")},
        ),
        (
            "Retries and limits",
            {
                "fields": (
                    "max_retries",
                    "retry_backoff",
                    "retry_backoff_max",
                    "on_worker_lost",
                    "soft_time_limit",
                    "time_limit",
                )
            },
        ),
        (
            "Bookkeeping",
            {
                "classes": ("collapse",),
                "fields": (
                    "next_run_at",
                    "last_scheduled_at",
                    "created_at",
                    "updated_at",
                    "deleted_at",
                ),
            },
        ),
    )

    @admin.display(description="next run (job's zone)", ordering="next_run_at")
    def next_run_local(self, job: JobDefinition) -> str:
        if job.next_run_at is None:
            return "—"
        try:
            zone = job.schedule.zone
        except ScheduleError:
            return "invalid schedule"
        return f"{job.next_run_at.astimezone(zone):%Y-%m-%d %H:%M:%S %Z}"

    @admin.display(description=f"next {PREVIEW_COUNT} runs")
    def upcoming(self, job: JobDefinition) -> SafeString | str:
        if not job.cron:
            return "Save the job to see its upcoming runs."
        try:
            schedule = job.schedule
        except ScheduleError as exc:
            return f"No preview: {exc}"
        times = schedule.fire_times(timezone.now(), PREVIEW_COUNT)
        rows = (
            (
                f"{t.astimezone(schedule.zone):%a %Y-%m-%d %H:%M:%S %Z}",
                f"{t:%Y-%m-%d %H:%M:%S} UTC",
                schedule.dst_note(t) or "",
            )
            for t in times
        )
        return format_html(
            "<table><thead><tr><th>{}</th><th>UTC</th><th></th></tr></thead>"
            "<tbody>{}</tbody></table>",
            job.timezone,
            format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
        )

    def get_queryset(self, request: HttpRequest) -> Any:
        # Operators see soft-deleted jobs too (restoring them is their call).
        return JobDefinition.all_objects.all()


@admin.register(JobRun)
class JobRunAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "job",
        "scheduled_for",
        "trigger",
        "status",
        "attempt",
        "queued_at",
        "started_at",
        "finished_at",
        "duration",
        "worker",
        "dispatched_by",
        "epoch",
    )
    list_filter = ("status", "trigger")
    list_select_related = ("job",)
    date_hierarchy = "scheduled_for"
    search_fields = ("job__name", "task_id")
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
