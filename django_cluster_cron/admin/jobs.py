"""The jobs pages: the list (its filters, the runs loaded for a page) and the change form's
fields and permissions; the list's columns and the form's read-only fields are in
job_columns.py, the form itself in job_form.py, the operator actions and pages in
job_actions.py."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.utils import timezone

from ..declared import CODE_FIELDS
from ..ledger.summaries import trends
from ..models import JobDefinition, JobRun, OverlapPolicy, RunStatus, not_ahead
from ..redaction import ARGUMENT_FIELDS
from .declared import left_out
from .display import ahead_due_by_job, recent_runs_by_job
from .job_actions import DELETED_READ_ONLY, JobOperations
from .job_columns import TREND_DAYS, JobColumns
from .job_form import POLICY_HELP, JobDefinitionForm, task_suggestions
from .lookups import list_lookup_allowed
from .runs import CappedCountPaginator


class LastStatusFilter(admin.SimpleListFilter):
    title = "last run status"
    parameter_name = "last_status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in RunStatus.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        latest = not_ahead(JobRun.objects.filter(job=OuterRef("pk")), timezone.now())
        latest = latest.order_by("-scheduled_for")
        annotated = queryset.annotate(last_status=Subquery(latest.values("status")[:1]))
        return cast("QuerySet[Any]", annotated.filter(last_status=value))


class TaskFilter(admin.SimpleListFilter):
    """By task, among the tasks the project defines (and the one asked for): not a DISTINCT over
    every job, which reads a million jobs whole."""

    title = "task"
    parameter_name = "task__exact"  # the field filter's, which links and bookmarks carry

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = {name for name, _kind in task_suggestions(include_jobs=False)}
        if self.value():
            names.add(str(self.value()))
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(task=self.value()) if self.value() else queryset


class DeletedFilter(admin.SimpleListFilter):
    title = "deleted"
    parameter_name = "deleted"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "live jobs"), ("yes", "soft-deleted")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("yes", "no"):
            return cast("QuerySet[Any]", queryset.filter(deleted_at__isnull=self.value() == "no"))
        return queryset


class JobChangeList(ChangeList):
    """Loads the last runs of every job on the page in one query (for strip, status, rate), and
    their success over the last days in one more (from the daily summaries)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        ids = [job.pk for job in self.result_list]
        now = timezone.now()
        recent = recent_runs_by_job(ids, now)
        ahead = ahead_due_by_job(ids, now)
        trend = trends(ids, days=TREND_DAYS, now=now)
        for job in self.result_list:
            job.recent_runs = recent.get(job.pk, [])
            job.ahead_due = ahead.get(job.pk)
            job.trend = trend.get(job.pk)


@admin.register(JobDefinition)
class JobDefinitionAdmin(JobColumns, JobOperations):
    form = JobDefinitionForm

    class Media:
        js = ("django_cluster_cron/preview.js",)
        css = {"all": ("django_cluster_cron/admin.css",)}  # noqa: RUF012

    # What an operator scans, narrow enough for 1,366 px: the task under the name, the zone in
    # the next run's time, the last status at the right end of the strip (details on hover).
    list_display = (
        "job_name",
        "schedule",
        "state",
        "next_run",
        "recent",
    )
    list_display_links = ("job_name",)
    list_filter = (
        "enabled",
        LastStatusFilter,
        TaskFilter,
        "catchup_policy",
        "overlap_policy",
        DeletedFilter,
    )
    search_fields = ("name", "task", "description")
    list_per_page = 50
    # A million jobs are not counted per page view: at most COUNT_CAP + 1 of them.
    paginator = CappedCountPaginator
    show_full_result_count = False
    readonly_fields = (
        "buffered_shown",
        "retention_shown",
        "defined_in",
        "upcoming",
        "history_chart",
        "daily_chart",
        "scheduled_runs",
        "consecutive_failures",
        "next_run_shown",
        "last_scheduled_shown",
        "created_shown",
        "updated_shown",
        "deleted_shown",
    )
    fieldsets = (
        (None, {"fields": ("name", "description", "enabled", "pause_note", "defined_in")}),
        ("Recent runs", {"fields": ("history_chart", "daily_chart")}),
        (
            "Schedule",
            {
                "fields": (
                    "cron",
                    "timezone",
                    "exclusions",
                    ("start_at", "end_at"),
                    "jitter",
                    "upcoming",
                )
            },
        ),
        ("Task", {"fields": ("task", "args", "kwargs", "queue", "priority", "expires")}),
        (
            "Policies",
            {
                "fields": (
                    "catchup_policy",
                    "catchup_window",
                    ("overlap_policy", "max_buffered", "buffered_shown"),
                    ("max_runs", "scheduled_runs"),
                    ("pause_after_failures", "consecutive_failures"),
                )
            },
        ),
        (
            "Retries and limits",
            {
                "fields": (
                    "max_retries",
                    "retry_backoff",
                    "retry_backoff_max",
                    "on_worker_lost",
                    "on_uncertain",
                    "cancel_interrupts",
                    "cancel_grace",
                    "soft_time_limit",
                    "time_limit",
                )
            },
        ),
        (
            "Pieces",
            {
                "classes": ("collapse",),
                "description": "Split each slot into pieces run across the workers (each piece "
                "claimed, retried and recovered on its own; the run's status follows them).",
                "fields": (
                    ("pieces", "pieces_planner"),
                    ("max_parallel_pieces", "max_failed_pieces"),
                    ("pieces_success", "pieces_success_count", "pieces_required"),
                    "on_complete",
                ),
            },
        ),
        (
            "Retention",
            {
                "classes": ("collapse",),
                "description": "How long the ledger keeps this job's finished runs; the leader "
                "prunes what is older, after summing each day up. Runs waiting or running are "
                "never pruned.",
                "fields": (("retention", "keep_last"), "retention_shown"),
            },
        ),
        (
            "Bookkeeping",
            {
                "classes": ("collapse",),
                "fields": (
                    "next_run_shown",
                    "last_scheduled_shown",
                    "created_shown",
                    "updated_shown",
                    "deleted_shown",
                ),
            },
        ),
        (None, {"fields": ("change_note",)}),
    )
    actions = ("pause_jobs", "resume_jobs", "run_jobs_now", "soft_delete_jobs", "restore_jobs")
    change_form_template = "admin/django_cluster_cron/jobdefinition/change_form.html"
    change_list_template = "admin/django_cluster_cron/jobdefinition/change_list.html"

    # -- queryset, permissions -----------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobDefinition]:
        # Operators see soft-deleted jobs too (the "deleted" filter; restoring them is an action).
        return cast("QuerySet[JobDefinition]", JobDefinition.all_objects.all())

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def lookup_allowed(self, lookup: str, value: Any, request: HttpRequest | None = None) -> bool:
        return list_lookup_allowed(self, lookup, value, request)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        # Declarations the sync leaves out have no row (or an old one): say so above the list.
        context = {**(extra_context or {}), "declared_left_out": left_out()}
        return super().changelist_view(request, context)

    def get_form(
        self, request: HttpRequest, obj: Any | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        for name, text in POLICY_HELP.items():
            if name in form.base_fields:
                form.base_fields[name].help_text = text
        return form

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        if obj is not None and obj.source == "code":
            # What code declares is changed in code (and synced); operators still pause,
            # resume, run now and backfill.
            fields += ("name", *CODE_FIELDS)
        fields += ("args_shown", "kwargs_shown")
        if not self.has_pause_permission(request):
            # Pausing, resuming and the pause's note are the pause permission's, on every path.
            fields += ("enabled", "pause_note")
        return fields

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        # Arguments the user cannot edit are shown masked (their secret-looking values), not as
        # the stored JSON a read-only model field would show.
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None:  # the add form
            return fieldsets
        readonly = set(self.get_readonly_fields(request, obj))
        if self.has_change_permission(request, obj) and not readonly & set(ARGUMENT_FIELDS):
            return fieldsets
        shown: dict[Any, Any] = {name: f"{name}_shown" for name in ARGUMENT_FIELDS}
        return [
            (title, {**options, "fields": tuple(shown.get(f, f) for f in options["fields"])})
            for title, options in fieldsets
        ]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Hard delete (with the whole run history) stays with superusers; operators soft-delete.
        return bool(request.user.is_superuser)

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> Any:
        # Django 6.1 passes where the actions are shown (and warns about overrides that do not
        # name the parameter); earlier versions take the request alone.
        if action_location is None:
            actions = super().get_actions(request)
        else:
            actions = super().get_actions(request, action_location)  # type: ignore[call-arg]
        if not request.user.is_superuser:
            actions.pop("delete_selected", None)
        return actions

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        job = context.get("original")
        if job is not None and job.deleted_at is not None:
            messages.warning(request, DELETED_READ_ONLY)
        context.update(
            can_pause=self.has_pause_permission(request),
            can_run=self.has_run_permission(request),
            can_backfill=self.has_backfill_permission(request),
            overlap_choices=OverlapPolicy.choices,
        )
        return super().render_change_form(request, context, *args, **kwargs)
