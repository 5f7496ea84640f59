"""The operator actions on jobs: the list actions (pause, resume, run now, soft delete,
restore), the per-job pages (pause with a note, resume, run now, backfill), the live preview and
the coming-dispatches page, each behind its own model permission."""

from __future__ import annotations

import functools
from typing import Any, cast

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
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

from .. import actions
from ..actions import ActionRefused
from ..core.errors import ScheduleError
from ..models import JobDefinition, RunStatus
from .forecast import forecast_view
from .history import AuditedAdmin
from .job_form import (
    PREVIEW_INPUT_LIMIT,
    BackfillForm,
    PauseForm,
    preview_html,
    rules_from_text,
    timing_from_query,
)

DELETED_REFUSED = "the job is deleted: restore it first."
DELETED_READ_ONLY = (
    "This job is deleted: it is read-only until it is restored (in the jobs list, filter "
    'deleted: soft-deleted, select it and run "Restore selected jobs").'
)


class JobOperations(AuditedAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
    """The jobs admin's operator actions and pages (JobDefinitionAdmin builds on it)."""

    # -- permissions of the operator actions -------------------------------------------

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

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A soft-deleted job is read-only until it is restored, whoever looks at it: its page is
        # shown as a view-only page (DELETED_READ_ONLY says why) and a save is refused.
        if obj is not None and getattr(obj, "deleted_at", None) is not None:
            return False
        return super().has_change_permission(request, obj)

    def _live(
        self, request: HttpRequest, queryset: QuerySet[JobDefinition]
    ) -> QuerySet[JobDefinition]:
        """The selected jobs that are not deleted; each deleted one is named as refused."""
        for job in queryset.filter(deleted_at__isnull=False):
            self.message_user(request, f"{job}: {DELETED_REFUSED}", messages.ERROR)
        return cast("QuerySet[JobDefinition]", queryset.filter(deleted_at__isnull=True))

    # -- actions -------------------------------------------------------------------------

    def _each(
        self, request: HttpRequest, queryset: QuerySet[JobDefinition], verb: str, do: Any
    ) -> None:
        done = 0
        for job in queryset:
            try:
                message = do(job)
            except (ActionRefused, ValidationError) as exc:
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
        self._call(request, self._live(request, queryset).filter(enabled=True), "pause", "Paused")

    @admin.action(description="Resume selected jobs (no catch-up)", permissions=["pause"])
    def resume_jobs(self, request: HttpRequest, queryset: QuerySet[JobDefinition]) -> None:
        live = self._live(request, queryset)
        self._call(request, live.filter(enabled=False), "resume", "Resumed")

    @admin.action(description="Run selected jobs now", permissions=["run"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[JobDefinition]) -> None:
        by = f"admin:{request.user.get_username()}"

        def run(job: JobDefinition) -> str:
            created = actions.run_now(job, by=by)
            return f"Run now: run {created.pk} ({created.status})."

        self._each(request, self._live(request, queryset), "Started", run)

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
        rules = rules_from_text(request.GET.get("exclusions", "")[: PREVIEW_INPUT_LIMIT * 10])
        return HttpResponse(preview_html(cron, zone, timezone.now(), timing, rules or None))

    def _job_or_404(self, request: HttpRequest, pk: int, allowed: bool) -> JobDefinition:
        if not allowed:
            raise PermissionDenied
        job = self.get_object(request, str(pk))
        if job is None:
            raise Http404
        return cast(JobDefinition, job)

    def _refused_if_deleted(self, request: HttpRequest, job: JobDefinition) -> HttpResponse | None:
        """Back to the job's page with why, for a deleted job; None for a live one."""
        if job.deleted_at is None:
            return None
        self.message_user(request, f"{job} is deleted: restore it first.", messages.ERROR)
        return self._back(job)

    def _back(self, job: JobDefinition) -> HttpResponseRedirect:
        return HttpResponseRedirect(
            reverse("admin:django_cluster_cron_jobdefinition_change", args=[job.pk])
        )

    def pause_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        job = self._job_or_404(request, pk, self.has_pause_permission(request))
        if refused := self._refused_if_deleted(request, job):
            return refused
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
        if refused := self._refused_if_deleted(request, job):
            return refused
        job.resume()
        self.log_change(request, job, "Resumed.")
        self.message_user(request, f"Resumed {job}; it runs from its next slot.", messages.SUCCESS)
        return self._back(job)

    def run_now_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        job = self._job_or_404(request, pk, self.has_run_permission(request))
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if refused := self._refused_if_deleted(request, job):
            return refused
        try:
            run = actions.run_now(
                job,
                by=f"admin:{request.user.get_username()}",
                overlap_policy=request.POST.get("overlap_policy") or None,
            )
        except ActionRefused as exc:
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
        if refused := self._refused_if_deleted(request, job):
            return refused
        form = BackfillForm(request.POST or None)
        plan = None
        if request.method == "POST" and form.is_valid():
            start, end = form.cleaned_data["start"], form.cleaned_data["end"]
            try:
                policy = form.cleaned_data["overlap_policy"] or None
                actions.overlap_override(job, policy)
                if "confirm" in request.POST:
                    runs = actions.backfill(
                        job,
                        start,
                        end,
                        by=f"admin:{request.user.get_username()}",
                        overlap_policy=policy,
                    )
                    self.log_change(request, job, f"Backfill {start} to {end}: {len(runs)} runs.")
                    self.message_user(
                        request, f"Backfill recorded {len(runs)} run(s).", messages.SUCCESS
                    )
                    return self._back(job)
                plan = actions.plan_backfill(job, start, end)
            except (ActionRefused, ScheduleError) as exc:
                form.add_error(None, str(exc))
        return self._render(
            request,
            job,
            "backfill",
            form,
            title=f"Backfill {job}",
            plan=plan,
            limit=actions.BACKFILL_LIMIT,
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


def _text(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(exc.messages)
    return str(exc)
