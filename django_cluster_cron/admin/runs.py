"""The run ledger: a read-only list built for millions of rows, details, retry and cancel (a
run's pieces: :mod:`.pieces`)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import Max, Min, QuerySet
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
)
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import actions
from ..actions import ActionRefused
from ..ledger.piece_runs import progress_of
from ..models import JobDefinition, JobRun, RunStatus
from ..ops.status import ledger_counts
from ..validation import whole_number
from .display import duration_text, ledger_size, moment_column, run_badge, status_count
from .lookups import list_lookup_allowed
from .pieces import RunPieces
from .readonly import ReadOnlyAdmin

logger = logging.getLogger("django_cluster_cron.admin")

COUNT_CAP = 10_000
# Where the run list's view leaves the ledger's counts for its status filter.
LEDGER_ATTR = "cluster_cron_ledger"
# Statuses whose reason the list shows under the badge: why the slot did not run, or waits.
NOT_RUN = (RunStatus.SKIPPED, RunStatus.MISSED, RunStatus.CANCELLED, RunStatus.BUFFERED)
JOB_FILTER_CHOICES = 30


class CappedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Counts at most COUNT_CAP + 1 rows: a million-row ledger must not be counted per page view.

    Past the cap the list shows "10,001" results and pages up to that far; filters narrow it.
    """

    @cached_property
    def count(self) -> int:
        # In no order: MariaDB sorted 100,000 jobs by name to count the first 10,001 (84 ms).
        capped = self.object_list.order_by()[: COUNT_CAP + 1]  # type: ignore[attr-defined]
        return int(capped.count())


class LedgerQuerySet(QuerySet[JobRun]):
    """The run ledger for the admin list: its date drill-down costs two index lookups.

    Django's date hierarchy lists the years, months or days that have rows with ``SELECT
    DISTINCT date_trunc(...)`` over every matching run — a full scan of a million-row ledger on
    each page view. Here the choices are every period between the first and the last matching
    run (``MIN``/``MAX`` on an index); a period without runs shows an empty list when opened.
    """

    def datetimes(self, field_name: str, kind: str, order: str = "ASC", tzinfo: Any = None) -> Any:
        if field_name != "scheduled_for" or kind not in ("year", "month", "day"):
            return super().datetimes(field_name, kind, order, tzinfo)  # type: ignore[arg-type]
        bounds = self.order_by().aggregate(first=Min(field_name), last=Max(field_name))
        if bounds["first"] is None:
            return []
        zone = tzinfo or timezone.get_current_timezone()
        first = timezone.localtime(bounds["first"], zone)
        last = timezone.localtime(bounds["last"], zone)
        periods = []
        current = first.replace(hour=0, minute=0, second=0, microsecond=0)
        if kind in ("year", "month"):
            current = current.replace(day=1)
        if kind == "year":
            current = current.replace(month=1)
        while current <= last:
            periods.append(current)
            if kind == "day":
                current = (current + timedelta(days=1)).replace(hour=0)
            elif kind == "month":
                current = (current + timedelta(days=32)).replace(day=1)
            else:
                current = current.replace(year=current.year + 1)
        return periods if order == "ASC" else periods[::-1]


class LedgerChangeList(ChangeList):
    """Says "N results (Show all)" only when a filter or search narrowed the list.

    The ledger never counts all its rows (``show_full_result_count`` is off), so Django's list
    cannot tell a filtered list from the whole one and offered "Show all" on the whole one.
    """

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        if not (self.has_active_filters or self.query or self.date_hierarchy_filtered()):
            self.full_result_count = self.result_count

    def get_ordering(self, request: HttpRequest, queryset: QuerySet[Any]) -> list[Any]:
        # One job's slots are unique: no tie for the id to break, and without it MySQL/MariaDB
        # read the job's (job, slot) index in order instead of sorting all its runs.
        found = list(super().get_ordering(request, queryset))
        by_slot = any(str(field).lstrip("-") == "scheduled_for" for field in found[:-1])
        one_job = bool(self.params.get(JobFilter.parameter_name))
        if one_job and by_slot and found[-1:] in (["-pk"], ["pk"]):
            return found[:-1]
        return found

    def date_hierarchy_filtered(self) -> bool:
        field = self.date_hierarchy
        return bool(field) and any(key.startswith(f"{field}__") for key in self.params)


class StatusFilter(admin.SimpleListFilter):
    """By status, each with its count from the ledger's last measurement (never counted here)."""

    title = "status"
    parameter_name = "status__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        found = getattr(request, LEDGER_ATTR, None)
        return [
            (value, f"{label} ({count})" if (count := status_count(found, value)) else label)
            for value, label in RunStatus.choices
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(status=self.value()) if self.value() else queryset


class JobFilter(admin.SimpleListFilter):
    """Filter by job without scanning the ledger for the jobs that occur in it."""

    title = "job"
    parameter_name = "job__id__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        jobs = JobDefinition.all_objects.order_by("name").values_list("pk", "name")
        choices = [(str(pk), name) for pk, name in jobs[:JOB_FILTER_CHOICES]]
        current = self.value()
        if current and whole_number(current) is None:
            # Django's answer to a bad filter value: the list again, with "?e=1".
            raise IncorrectLookupParameters(f"job: {current[:40]!r} is not a job id")
        if current and current not in dict(choices):
            name = JobDefinition.all_objects.filter(pk=current).values_list("name", flat=True)
            choices.append((current, next(iter(name), f"job {current}")))
        return choices

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(job_id=self.value()) if self.value() else queryset


@admin.register(JobRun)
class JobRunAdmin(RunPieces, ReadOnlyAdmin):
    # What an operator scans, narrow enough for 1,366 px: the slot opens the run; the trigger and
    # a retry's attempt sit under the status; the run's id, when it was queued and finished, who
    # dispatched it and the epoch are on the run's page.
    list_display = (
        "slot",
        "job_link",
        "status_and_trigger",
        "started",
        "took",
        "worker_short",
    )
    list_display_links = ("slot",)
    list_filter = (StatusFilter, "trigger", JobFilter)
    list_select_related = ()  # the page's jobs are prefetched (get_queryset), not joined
    date_hierarchy = "scheduled_for"
    search_fields = ("=task_id", "job__name")
    show_full_result_count = False
    paginator = CappedCountPaginator
    list_per_page = 100
    actions = ("retry_runs", "cancel_runs")
    change_form_template = "admin/django_cluster_cron/jobrun/change_form.html"
    change_list_template = "admin/django_cluster_cron/jobrun/change_list.html"
    fieldsets = (
        (
            None,
            {"fields": ("job", "slot", "status_badge", "trigger", "attempt", "task_id")},
        ),
        (
            "Timing",
            {
                "fields": (
                    "due",
                    "queued",
                    "started_full",
                    "heartbeat",
                    "finished",
                    "took",
                    "retry",
                )
            },
        ),
        (
            "Where",
            {"fields": ("worker", "worker_pool", "backend_result_id", "dispatched_by", "epoch")},
        ),
        ("Cancel", {"fields": ("cancel_asked", "cancel_requested_by")}),
        ("Pieces", {"fields": ("piece_count", "progress", "pieces_table")}),
        ("Outcome", {"fields": ("reason", "result", "error", "traceback_block")}),
    )
    readonly_fields = (
        "job",
        "slot",
        "status_badge",
        "trigger",
        "attempt",
        "task_id",
        "due",
        "queued",
        "started_full",
        "heartbeat",
        "finished",
        "took",
        "retry",
        "worker",
        "worker_pool",
        "backend_result_id",
        "dispatched_by",
        "epoch",
        "cancel_asked",
        "cancel_requested_by",
        "piece_count",
        "progress",
        "pieces_table",
        "reason",
        "result",
        "error",
        "traceback_block",
    )

    class Media:
        css = {"all": ("django_cluster_cron/admin.css",)}  # noqa: RUF012

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobRun]:
        ordering = list(self.get_ordering(request) or ["-scheduled_for"])
        # The page's jobs in a second query, not a join: MySQL/MariaDB planned the join from the
        # jobs' side and sorted the whole ledger.
        ledger = LedgerQuerySet(JobRun).prefetch_related("job")
        return cast("QuerySet[JobRun]", ledger.order_by(*ordering))

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        """The list, headed by the ledger's size as last measured (never counted here: the list
        itself counts at most ``COUNT_CAP`` + 1 rows); the status filter shows the same counts."""
        try:
            found = ledger_counts()
        except Exception as exc:  # the lease backend or the cache unreadable: the list is shown
            logger.warning("admin.ledger_counts_unavailable error=%s: %s", type(exc).__name__, exc)
            found = None
        setattr(request, LEDGER_ATTR, found)
        return super().changelist_view(
            request, {**(extra_context or {}), "ledger_size": ledger_size(found)}
        )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return LedgerChangeList

    def lookup_allowed(self, lookup: str, value: Any, request: HttpRequest | None = None) -> bool:
        return list_lookup_allowed(self, lookup, value, request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The view permission alone: Django's default also lets the (unused) change permission
        # read the ledger, whose errors and tracebacks are for those given view_jobrun.
        return bool(request.user.has_perm("django_cluster_cron.view_jobrun"))

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_cluster_cron.retry_jobrun")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_cluster_cron.cancel_jobrun")

    @admin.display(description="job", ordering="job__name")
    def job_link(self, run: JobRun) -> SafeString:
        url = reverse("admin:django_cluster_cron_jobdefinition_change", args=[run.job_id])
        name = run.job.name
        return format_html('<a href="{}" class="dcc-name" title="{}">{}</a>', url, name, name)

    @admin.display(description="status", ordering="status")
    def status_and_trigger(self, run: JobRun) -> SafeString:
        attempt = f", attempt {run.attempt}" if run.attempt > 1 else ""
        if run.piece_count:  # a run split into pieces: how far they are
            attempt += f", {progress_of(run)}"
        why = ""
        if run.status in NOT_RUN and run.reason:  # why its slot did not run, in the list
            why = run.reason if len(run.reason) <= 90 else run.reason[:89] + "…"
        return format_html(
            '{}<small class="dcc-rate">{}{}</small>{}',
            run_badge(run, timezone.now()),
            run.get_trigger_display(),
            attempt,
            format_html('<small class="dcc-why" title="{}">{}</small>', run.reason, why)
            if why
            else "",
        )

    slot = moment_column("scheduled_for", "slot", ordering="scheduled_for")
    # The start beside its slot: the date only when it is not the slot's.
    started = moment_column("started_at", "started", ordering="started_at", day="scheduled_for")
    started_full = moment_column("started_at", "started")
    queued = moment_column("queued_at", "queued")
    heartbeat = moment_column("heartbeat_at", "last heartbeat")
    finished = moment_column("finished_at", "finished")
    retry = moment_column("retry_at", "next attempt at")
    due = moment_column("due_at", "due (sent no earlier)")
    cancel_asked = moment_column("cancel_requested_at", "cancel asked at")

    @admin.display(description="worker", ordering="worker")
    def worker_short(self, run: JobRun) -> SafeString | str:
        if not run.worker:
            return "—"
        return format_html('<span class="dcc-worker" title="{}">{}</span>', run.worker, run.worker)

    @admin.display(description="status", ordering="status")
    def status_badge(self, run: JobRun) -> SafeString:
        return run_badge(run, timezone.now())

    @admin.display(description="took", ordering="duration")
    def took(self, run: JobRun) -> str:
        return duration_text(run.duration)

    @admin.display(description="traceback")
    def traceback_block(self, run: JobRun) -> SafeString | str:
        if not run.traceback:
            return "—"
        return format_html('<pre style="white-space:pre-wrap">{}</pre>', run.traceback)

    def _each(self, request: HttpRequest, runs: QuerySet[JobRun], verb: str, do: Any) -> None:
        done = 0
        for run in runs.select_related("job"):
            try:
                do(run)
            except ActionRefused as exc:
                self.message_user(request, str(exc), messages.ERROR)
                continue
            self.log_change(request, run, f"{verb}.")
            done += 1
        if done:
            self.message_user(request, f"{verb}: {done} run(s).", messages.SUCCESS)

    @admin.action(description="Retry selected failed runs", permissions=["retry"])
    def retry_runs(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> None:
        self._each(request, queryset, "Retried", actions.retry)

    @admin.action(description="Cancel selected runs (waiting or running)", permissions=["cancel"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> None:
        self._each(request, queryset, "Cancelled or asked to stop", self._canceller(request))

    def _canceller(self, request: HttpRequest) -> Any:
        by = request.user.get_username()
        return lambda run: actions.cancel(run, reason=f"cancelled by {by}", by=by)

    # -- the run's page: its cancel button ----------------------------------------------

    def get_urls(self) -> list[Any]:
        cancel = self.admin_site.admin_view(self.cancel_view)
        return [
            path("<int:pk>/cancel/", cancel, name="django_cluster_cron_run_cancel"),
            *self.piece_urls(),
            *super().get_urls(),
        ]

    def cancel_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        run = self.posted_run(request, pk, self.has_cancel_permission(request))
        if isinstance(run, HttpResponse):
            return run
        try:
            run = self._canceller(request)(run)
        except ActionRefused as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.log_change(request, run, "Cancelled or asked to stop.")
            self.message_user(request, actions.cancel_outlook(run), messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:django_cluster_cron_jobrun_change", args=[pk]))

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "can_cancel": self.has_cancel_permission(request)}
        return super().change_view(request, object_id, form_url, context)
