"""The jobs pages: list with run strips, the form with its preview, and the operator actions."""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ImproperlyConfigured, PermissionDenied, ValidationError
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import operations
from ..celery_app import registered_task_names
from ..core.catchup import PLAIN
from ..core.cron import CronSchedule
from ..core.errors import ScheduleError
from ..core.timezones import available_timezones
from ..core.timing import SlotTiming
from ..declared import CODE_FIELDS
from ..describe import describe
from ..models import MAX_JITTER, JobDefinition, JobRun, RunStatus
from ..operations import OperationError
from ..validation import DEFINITION_FIELDS
from .charts import run_timeline
from .display import (
    RECENT_RUNS,
    moment,
    recent_runs_by_job,
    run_strip,
    success_rate,
    zone_of,
)
from .forecast import forecast_view
from .history import AuditedAdmin

PREVIEW_COUNT = 10
# Longer than any valid cron (200) or zone name; the parser reports what is wrong below that.
PREVIEW_INPUT_LIMIT = 300


def preview_html(cron: str, zone: str, now: datetime, timing: SlotTiming = PLAIN) -> SafeString:
    """The schedule in words and its next runs in the zone and in UTC, with DST notes.

    With a job's active period and jitter (``timing``), the list holds the slots it will really
    run and when each is dispatched.
    """
    if not cron.strip():
        return format_html("{}", "Type a cron expression to see its next runs.")
    try:
        schedule = CronSchedule.parse(cron, zone)  # not the cached parser: input is arbitrary
    except ScheduleError as exc:
        return format_html('<p class="dcc-preview-error">No preview: {}</p>', exc)
    upcoming = timing.upcoming(schedule, now, PREVIEW_COUNT)
    jittered = timing.jitter > timedelta(0)
    rows = (
        (
            f"{due.astimezone(schedule.zone):%a %Y-%m-%d %H:%M:%S %Z}",
            f"{due:%Y-%m-%d %H:%M:%S} UTC",
            f"slot {slot.astimezone(schedule.zone):%H:%M:%S} + {(due - slot).seconds} s"
            if jittered
            else "",
            schedule.dst_note(slot) or "",
        )
        for slot, due in upcoming
    )
    notes = []
    if timing.start_at and timing.start_at > now:
        notes.append(f"Starts {timing.start_at.astimezone(schedule.zone):%Y-%m-%d %H:%M:%S %Z}.")
    if timing.end_at:
        ended = timing.end_at < now
        ends = timing.end_at.astimezone(schedule.zone)
        notes.append(f"{'Ended' if ended else 'Ends'} {ends:%Y-%m-%d %H:%M:%S %Z}.")
    if not upcoming:
        notes.append("No more runs: the job is finished.")
    return format_html(
        '<p>{}</p><p>{}</p><table class="dcc-upcoming"><thead><tr><th>{}</th><th>UTC</th>'
        "<th>{}</th><th>DST</th></tr></thead><tbody>{}</tbody></table>",
        describe(cron),
        " ".join(notes),
        zone,
        "jitter" if jittered else "",
        format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
    )


def timing_from_query(query: Any) -> SlotTiming:
    """The active period and jitter the job form holds (its unsaved values); ignores bad ones."""

    def when(name: str) -> datetime | None:
        parts = [query.get(f"{name}_0", ""), query.get(f"{name}_1", "")]
        if not parts[0]:
            return None
        try:
            return cast(datetime, forms.SplitDateTimeField(required=False).clean(parts))
        except ValidationError:
            return None

    try:
        jitter = min(max(int(query.get("jitter") or 0), 0), MAX_JITTER)
        key = max(int(query.get("job") or 0), 0)
    except ValueError:
        jitter, key = 0, 0
    start, end = when("start_at"), when("end_at")
    if start and end and end <= start:
        end = None
    return SlotTiming(start, end, timedelta(seconds=jitter), key if jitter else 0)


def _task_choices(current: str | None) -> list[tuple[str, str]]:
    try:
        names = registered_task_names()
    except ImproperlyConfigured:
        names = []
    from ..conf import app_settings

    choices = [(n, n) for n in names if app_settings.task_allowed(n)]
    if current and current not in dict(choices):
        # Keep an unknown stored value visible; the model's clean() explains what is wrong.
        from ..validation import private_task_reason

        why = "not allowed" if private_task_reason(current) else "not registered"
        choices.insert(0, (current, f"{current} ({why})"))
    return [("", "---------"), *choices]


def _help_text(field: str) -> str:
    return str(getattr(JobDefinition._meta.get_field(field), "help_text", ""))


def _timezone_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(available_timezones())]


class JSONText(forms.JSONField):
    """A JSON field whose parse error says where and what (Django's says "Enter a valid JSON.")."""

    def __init__(self, *args: Any, example: str = "", **kwargs: Any) -> None:
        self.example = example
        super().__init__(*args, **kwargs)

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and value.strip() and not self.disabled:
            try:
                json.loads(value)
            except json.JSONDecodeError as exc:
                where = (
                    f"line {exc.lineno}, column {exc.colno}"
                    if "\n" in value.strip()
                    else (f"character {exc.pos + 1}")
                )
                hint = " JSON strings take double quotes." if "'" in value else ""
                raise ValidationError(
                    "Not valid JSON: %(problem)s at %(where)s.%(hint)s Write %(example)s.",
                    code="invalid",
                    params={
                        "problem": exc.msg.lower(),
                        "where": where,
                        "hint": hint,
                        "example": self.example,
                    },
                ) from None
        return super().to_python(value)


class JobDefinitionForm(forms.ModelForm):  # type: ignore[type-arg]
    change_note = forms.CharField(
        required=False,
        max_length=500,
        label="Note for the history",
        help_text="Why you make this change (kept in the job's History with your name).",
        widget=forms.TextInput(attrs={"size": 60}),
    )

    class Meta:
        model = JobDefinition
        fields = ("name", "enabled", "pause_note", *DEFINITION_FIELDS)
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
        for name, example in (
            ("args", 'a list, such as [1, "two"] (or [] for none)'),
            ("kwargs", 'an object, such as {"limit": 10} (or {} for none)'),
        ):
            field = self.fields.get(name)
            if field is None:  # read-only here (declared in code, or a view-only user)
                continue
            self.fields[name] = JSONText(
                required=field.required,
                widget=field.widget,
                help_text=field.help_text,
                label=field.label,
                initial=field.initial,
                example=example,
            )
        self.fields["timezone"] = forms.ChoiceField(
            choices=_timezone_choices()
            + ([] if not self.data.get("timezone") else [(self.data["timezone"],) * 2]),
            initial="UTC",
            help_text=_help_text("timezone"),
        )


POLICY_HELP = {
    "catchup_policy": (
        "After an outage, which missed slots inside the catch-up window run: 'all' runs each "
        "(up to CATCHUP_CAP, the most recent), 'latest' runs only the most recent, 'none' runs "
        "only slots that are still on time. Slots not run are recorded as missed."
    ),
    "catchup_window": "How far back (HH:MM:SS) missed slots are considered after an outage.",
    "overlap_policy": (
        "'allow': runs may overlap. 'skip': a slot whose previous run is still waiting or "
        "running is recorded as skipped. 'buffer_one': at most one run waits behind the one "
        "running; further slots are skipped."
    ),
}


class BackfillForm(forms.Form):
    start = forms.DateTimeField(help_text="From (exclusive), in the server's time zone.")
    end = forms.DateTimeField(help_text="To (inclusive); must be in the past.")


class PauseForm(forms.Form):
    note = forms.CharField(
        required=False, max_length=255, help_text="Optional: why, shown in the jobs list."
    )


class LastStatusFilter(admin.SimpleListFilter):
    title = "last run status"
    parameter_name = "last_status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in RunStatus.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        latest = JobRun.objects.filter(job=OuterRef("pk")).order_by("-scheduled_for")
        annotated = queryset.annotate(last_status=Subquery(latest.values("status")[:1]))
        return cast("QuerySet[Any]", annotated.filter(last_status=value))


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
    """Loads the last runs of every job on the page in one query (for strip, status, rate)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        recent = recent_runs_by_job([job.pk for job in self.result_list])
        for job in self.result_list:
            job.recent_runs = recent.get(job.pk, [])


@admin.register(JobDefinition)
class JobDefinitionAdmin(AuditedAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
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
        "task",
        "catchup_policy",
        "overlap_policy",
        DeletedFilter,
    )
    search_fields = ("name", "task", "description")
    list_per_page = 50
    readonly_fields = (
        "defined_in",
        "upcoming",
        "history_chart",
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
        ("Recent runs", {"fields": ("history_chart",)}),
        (
            "Schedule",
            {"fields": ("cron", "timezone", ("start_at", "end_at"), "jitter", "upcoming")},
        ),
        ("Task", {"fields": ("task", "args", "kwargs", "queue", "priority", "expires")}),
        (
            "Policies",
            {
                "fields": (
                    "catchup_policy",
                    "catchup_window",
                    "overlap_policy",
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
        return fields

    @admin.display(description="Defined in")
    def defined_in(self, job: JobDefinition) -> str:
        if job.source == "code":
            return (
                f"code, at {job.code_origin}: the schedule, the task and the options are "
                "changed there and synced (manage.py sync_jobs, or migrate)"
            )
        return "the admin (or the API)"

    def _can(self, request: HttpRequest, codename: str) -> bool:
        return request.user.has_perm(f"django_cluster_cron.{codename}_jobdefinition")

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return self._can(request, "pause")

    def has_run_permission(self, request: HttpRequest) -> bool:
        return self._can(request, "run")

    def has_backfill_permission(self, request: HttpRequest) -> bool:
        return self._can(request, "backfill")

    def has_softdelete_permission(self, request: HttpRequest) -> bool:
        return self._can(request, "softdelete")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Hard delete (with the whole run history) stays with superusers; operators soft-delete.
        return bool(request.user.is_superuser)

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        if not request.user.is_superuser:
            actions.pop("delete_selected", None)
        return actions

    # -- list columns --------------------------------------------------------------------

    @admin.display(description="schedule", ordering="cron")
    def schedule(self, job: JobDefinition) -> SafeString:
        return format_html(
            '<code class="dcc-cron">{}</code><br><small class="dcc-words">{}</small>',
            job.cron,
            describe(job.cron),
        )

    @admin.display(description="state", ordering="enabled")
    def state(self, job: JobDefinition) -> SafeString:
        if job.deleted_at is not None:
            return format_html('<span style="color:{}">{}</span>', "#b71c1c", "deleted")
        finished = job.finished_reason(timezone.now())
        if finished:
            return format_html(
                '<span style="color:{}">{}</span><br><small>{}</small>',
                "#455a64",
                "finished",
                finished.removeprefix("finished: "),
            )
        if job.enabled:
            return format_html('<span style="color:{}">{}</span>', "#2e7d32", "enabled")
        note = format_html("<br><small>{}</small>", job.pause_note) if job.pause_note else ""
        return format_html('<span style="color:{}">{}</span>{}', "#ef6c00", "paused", note)

    @admin.display(description="name", ordering="name")
    def job_name(self, job: JobDefinition) -> SafeString:
        return format_html(
            '<span class="dcc-name" title="{}">{}</span><br><small class="dcc-task" title="{}">{}'
            "</small>",
            job.name,
            job.name,
            job.task,
            job.task,
        )

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, job: JobDefinition) -> SafeString | str:
        return moment(job.next_run_at, zone_of(job))

    @admin.display(description="next run at")
    def next_run_shown(self, job: JobDefinition) -> SafeString | str:
        return moment(job.next_run_at, zone_of(job))

    @admin.display(description="last scheduled slot")
    def last_scheduled_shown(self, job: JobDefinition) -> SafeString | str:
        return moment(job.last_scheduled_at, zone_of(job))

    @admin.display(description="created")
    def created_shown(self, job: JobDefinition) -> SafeString | str:
        return moment(job.created_at, zone_of(job))

    @admin.display(description="updated")
    def updated_shown(self, job: JobDefinition) -> SafeString | str:
        return moment(job.updated_at, zone_of(job))

    @admin.display(description="deleted")
    def deleted_shown(self, job: JobDefinition) -> SafeString | str:
        return moment(job.deleted_at, zone_of(job))

    @admin.display(description="last runs")
    def history_chart(self, job: JobDefinition) -> SafeString | str:
        if job._state.adding:  # the add form: no runs yet
            return "—"
        return run_timeline(JobRun.objects.filter(job=job), zone_of(job))

    def _recent(self, job: JobDefinition) -> list[dict[str, Any]]:
        recent = getattr(job, "recent_runs", None)
        if recent is None:  # outside the changelist (e.g. a detail page): one query
            recent = recent_runs_by_job([job.pk]).get(job.pk, [])
        return list(recent)

    @admin.display(description=f"last {RECENT_RUNS} runs")
    def recent(self, job: JobDefinition) -> SafeString | str:
        url = reverse("admin:django_cluster_cron_jobrun_changelist") + f"?job__id__exact={job.pk}"
        recent = self._recent(job)
        return format_html(
            '<a href="{}">{}</a><small class="dcc-rate">{}</small>',
            url,
            run_strip(recent, zone_of(job)),
            "" if (rate := success_rate(recent)) == "—" else f"{rate} succeeded",
        )

    @admin.display(description=f"next {PREVIEW_COUNT} runs")
    def upcoming(self, job: JobDefinition) -> SafeString:
        # The form's script re-fetches this box from preview_view as the operator types, so the
        # add form previews too, not only a saved job.
        return format_html(
            '<div class="dcc-preview" data-preview-url="{}" data-job="{}" aria-live="polite">{}'
            "</div>",
            reverse("admin:django_cluster_cron_job_preview"),
            job.pk or "",
            preview_html(job.cron, job.timezone, timezone.now(), job.timing()),
        )

    # -- actions -------------------------------------------------------------------------

    def _each(
        self, request: HttpRequest, queryset: QuerySet[JobDefinition], verb: str, do: Any
    ) -> None:
        done = 0
        for job in queryset:
            try:
                message = do(job)
            except (OperationError, ValidationError) as exc:
                self.message_user(request, f"{job}: {_text(exc)}", messages.ERROR)
                continue
            self.log_change(request, job, message)
            done += 1
        if done:
            self.message_user(request, f"{verb} {done} job(s).", messages.SUCCESS)

    def _call(
        self, request: HttpRequest, queryset: QuerySet[JobDefinition], method: str, verb: str
    ) -> None:
        """Call the JobDefinition method ``method`` on each job; log "<verb>." for each."""

        def call(job: JobDefinition) -> str:
            getattr(job, method)()
            return f"{verb}."

        self._each(request, queryset, verb, call)

    @admin.action(description="Pause selected jobs", permissions=["pause"])
    def pause_jobs(self, request: HttpRequest, queryset: QuerySet[JobDefinition]) -> None:
        self._call(request, queryset.filter(enabled=True), "pause", "Paused")

    @admin.action(description="Resume selected jobs (no catch-up)", permissions=["pause"])
    def resume_jobs(self, request: HttpRequest, queryset: QuerySet[JobDefinition]) -> None:
        self._call(request, queryset.filter(enabled=False), "resume", "Resumed")

    @admin.action(description="Run selected jobs now", permissions=["run"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[JobDefinition]) -> None:
        by = f"admin:{request.user.get_username()}"

        def run(job: JobDefinition) -> str:
            created = operations.run_now(job, by=by)
            return f"Run now: run {created.pk} ({created.status})."

        self._each(request, queryset.filter(deleted_at__isnull=True), "Started", run)

    @admin.action(description="Soft-delete selected jobs", permissions=["softdelete"])
    def soft_delete_jobs(self, request: HttpRequest, queryset: QuerySet[JobDefinition]) -> None:
        self._call(request, queryset.filter(deleted_at__isnull=True), "soft_delete", "Soft-deleted")

    @admin.action(description="Restore selected jobs", permissions=["softdelete"])
    def restore_jobs(self, request: HttpRequest, queryset: QuerySet[JobDefinition]) -> None:
        self._call(request, queryset.filter(deleted_at__isnull=False), "restore", "Restored")

    # -- per-job pages: pause with a note, run now, backfill -----------------------------

    def get_urls(self) -> list[Any]:
        def wrap(view: Any) -> Any:
            return self.admin_site.admin_view(self.audited(view))

        return [
            path("preview/", wrap(self.preview_view), name="django_cluster_cron_job_preview"),
            path(
                "coming/",
                self.admin_site.admin_view(functools.partial(forecast_view, self)),
                name="django_cluster_cron_job_forecast",
            ),
            path("<int:pk>/pause/", wrap(self.pause_view), name="django_cluster_cron_job_pause"),
            path("<int:pk>/resume/", wrap(self.resume_view), name="django_cluster_cron_job_resume"),
            path("<int:pk>/run-now/", wrap(self.run_now_view), name="django_cluster_cron_job_run"),
            path(
                "<int:pk>/backfill/",
                wrap(self.backfill_view),
                name="django_cluster_cron_job_backfill",
            ),
            *super().get_urls(),
        ]

    def preview_view(self, request: HttpRequest) -> HttpResponse:
        """The next fire times of the cron and zone in the query string, as an HTML fragment."""
        if not (self.has_add_permission(request) or self.has_view_or_change_permission(request)):
            raise PermissionDenied
        cron = request.GET.get("cron", "")[:PREVIEW_INPUT_LIMIT]
        zone = request.GET.get("timezone", "")[:PREVIEW_INPUT_LIMIT]
        timing = timing_from_query(request.GET)
        return HttpResponse(preview_html(cron, zone, timezone.now(), timing))

    def _job_or_404(self, request: HttpRequest, pk: int, allowed: bool) -> JobDefinition:
        if not allowed:
            raise PermissionDenied
        job = self.get_object(request, str(pk))
        if job is None:
            raise Http404
        return cast(JobDefinition, job)

    def _back(self, job: JobDefinition) -> HttpResponseRedirect:
        return HttpResponseRedirect(
            reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
        )

    def pause_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        job = self._job_or_404(request, pk, self.has_pause_permission(request))
        form = PauseForm(request.POST or None, initial={"note": job.pause_note})
        if request.method == "POST" and form.is_valid():
            job.pause(form.cleaned_data["note"])
            note = form.cleaned_data["note"]
            self.log_change(request, job, f"Paused. {note}".strip())
            self.message_user(request, f"Paused {job}.", messages.SUCCESS)
            return self._back(job)
        return self._render(request, job, "pause", form, title=f"Pause {job}")

    def resume_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        job = self._job_or_404(request, pk, self.has_pause_permission(request))
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        job.resume()
        self.log_change(request, job, "Resumed.")
        self.message_user(request, f"Resumed {job}; it runs from its next slot.", messages.SUCCESS)
        return self._back(job)

    def run_now_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        job = self._job_or_404(request, pk, self.has_run_permission(request))
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        try:
            run = operations.run_now(job, by=f"admin:{request.user.get_username()}")
        except OperationError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return self._back(job)
        self.log_change(request, job, f"Run now: run {run.pk} ({run.status}).")
        level = messages.WARNING if run.status == RunStatus.SKIPPED else messages.SUCCESS
        self.message_user(request, f"Run {run.pk} of {job}: {run.status}. {run.reason}", level)
        return HttpResponseRedirect(
            reverse("admin:django_cluster_cron_jobrun_change", args=[run.pk])
        )

    def backfill_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        job = self._job_or_404(request, pk, self.has_backfill_permission(request))
        form = BackfillForm(request.POST or None)
        plan = None
        if request.method == "POST" and form.is_valid():
            start, end = form.cleaned_data["start"], form.cleaned_data["end"]
            try:
                if "confirm" in request.POST:
                    runs = operations.backfill(
                        job, start, end, by=f"admin:{request.user.get_username()}"
                    )
                    self.log_change(request, job, f"Backfill {start} to {end}: {len(runs)} runs.")
                    self.message_user(
                        request, f"Backfill recorded {len(runs)} run(s).", messages.SUCCESS
                    )
                    return self._back(job)
                plan = operations.plan_backfill(job, start, end)
            except (OperationError, ScheduleError) as exc:
                form.add_error(None, str(exc))
        return self._render(
            request,
            job,
            "backfill",
            form,
            title=f"Backfill {job}",
            plan=plan,
            limit=operations.BACKFILL_LIMIT,
        )

    def _render(
        self, request: HttpRequest, job: JobDefinition, page: str, form: Any, **context: Any
    ) -> HttpResponse:
        return TemplateResponse(
            request,
            f"admin/django_cluster_cron/jobdefinition/{page}.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "original": job,
                "form": form,
                **context,
            },
        )

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        context.update(
            can_pause=self.has_pause_permission(request),
            can_run=self.has_run_permission(request),
            can_backfill=self.has_backfill_permission(request),
        )
        return super().render_change_form(request, context, *args, **kwargs)


def _text(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(exc.messages)
    return str(exc)
