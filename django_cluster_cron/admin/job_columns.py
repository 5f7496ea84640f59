"""What the jobs pages show of a job (JobDefinitionAdmin builds on :class:`JobColumns`): the
list's columns (name and task, schedule in words, state, next run, the last runs) and the change
form's read-only fields (where the job is defined, its arguments masked, its bookkeeping, its
last runs and the preview of its next ones)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..describe import describe
from ..ledger.summaries import Trend, daily
from ..models import JobDefinition, JobRun, RunStatus
from ..redaction import redact
from .charts import HISTORY_DAYS, daily_history, run_timeline
from .declared import left_out_note
from .display import (
    RECENT_RUNS,
    ahead_due_by_job,
    moment,
    moment_column,
    recent_runs_by_job,
    run_strip,
    success_rate,
    zone_of,
)
from .job_form import PREVIEW_COUNT, preview_html

# The jobs list's success rate over this many days before today, from the daily summaries.
TREND_DAYS = 30


class JobColumns:
    """The columns of the jobs list and the read-only fields of a job's page."""

    # -- the change form's read-only fields ------------------------------------------------

    @admin.display(description="args")
    def args_shown(self, job: JobDefinition) -> str:
        return json.dumps(redact(job.args), ensure_ascii=False)

    @admin.display(description="kwargs")
    def kwargs_shown(self, job: JobDefinition) -> str:
        return json.dumps(redact(job.kwargs), ensure_ascii=False)

    @admin.display(description="Defined in")
    def defined_in(self, job: JobDefinition) -> str:
        if job.source == "code":
            return (
                f"code, at {job.code_origin}: the schedule, the task and the options are "
                "changed there and synced (manage.py sync_jobs, or migrate)"
                + left_out_note(job.name)
            )
        return "the admin (or the API)"

    # -- the list's columns (and the page's bookkeeping, last runs and preview) -----------

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
        return self._next_run(job, getattr(job, "ahead_due", None))

    @admin.display(description="next run at")
    def next_run_shown(self, job: JobDefinition) -> SafeString | str:
        ahead = ahead_due_by_job([job.pk], timezone.now()) if job.pk else {}
        return self._next_run(job, ahead.get(job.pk))

    def _next_run(self, job: JobDefinition, ahead_due: datetime | None) -> SafeString | str:
        """The next run: one recorded ahead of its time if there is one (``next_run_at`` is
        then the instant after it), else ``next_run_at``."""
        if ahead_due is None:
            return moment(job.next_run_at, zone_of(job))
        return format_html(
            '{}<br><small class="dcc-rate" title="recorded ahead of its time; its message is '
            'sent then">recorded</small>',
            moment(ahead_due, zone_of(job)),
        )

    @admin.display(description="waiting their turn")
    def buffered_shown(self, job: JobDefinition) -> SafeString | str:
        """The runs the job holds back (its buffer's depth), linked to them in the ledger."""
        if job._state.adding:
            return "—"
        depth = JobRun.objects.filter(job_id=job.pk, status=RunStatus.BUFFERED).count()
        if not depth:
            return "none"
        url = reverse("admin:django_cluster_cron_jobrun_changelist")
        return format_html(
            '<a href="{}?job__id__exact={}&amp;status__exact=buffered">{} run(s)</a>',
            url,
            job.pk,
            depth,
        )

    @admin.display(description="kept")
    def retention_shown(self, job: JobDefinition) -> str:
        """What the ledger keeps of the job, per final status, with the project's defaults
        under its own overrides (or why its overrides cannot be read)."""
        try:
            policy = job.retention_policy()
        except ValueError as exc:
            return f"Cannot be applied: {exc}"
        return policy.describe()

    last_scheduled_shown = moment_column("last_scheduled_at", "last scheduled slot")
    created_shown = moment_column("created_at", "created")
    updated_shown = moment_column("updated_at", "updated")
    deleted_shown = moment_column("deleted_at", "deleted")

    @admin.display(description="last runs")
    def history_chart(self, job: JobDefinition) -> SafeString | str:
        if job._state.adding:  # the add form: no runs yet
            return "—"
        return run_timeline(JobRun.objects.filter(job=job), zone_of(job))

    @admin.display(description="runs per day")
    def daily_chart(self, job: JobDefinition) -> SafeString | str:
        if job._state.adding:
            return "—"
        now = timezone.now()
        return daily_history(daily(job.pk, days=HISTORY_DAYS, now=now), now.date())

    def _recent(self, job: JobDefinition) -> list[dict[str, Any]]:
        recent = getattr(job, "recent_runs", None)
        if recent is None:  # outside the changelist (e.g. a detail page): one query
            recent = recent_runs_by_job([job.pk]).get(job.pk, [])
        return list(recent)

    @admin.display(description=f"last {RECENT_RUNS} runs")
    def recent(self, job: JobDefinition) -> SafeString | str:
        url = reverse("admin:django_cluster_cron_jobrun_changelist") + f"?job__id__exact={job.pk}"
        recent = self._recent(job)
        trend: Trend | None = getattr(job, "trend", None)
        rate = None if trend is None else trend.success_rate
        return format_html(
            '<a href="{}">{}</a><small class="dcc-rate">{}</small>{}',
            url,
            run_strip(recent, zone_of(job)),
            "" if (last := success_rate(recent)) == "—" else f"{last} succeeded",
            ""
            if trend is None or rate is None
            else format_html(
                '<small class="dcc-rate" title="{}">{} days: {}% of {}</small>',
                ", ".join(f"{n:,} {s}" for s, n in trend.counts.items() if n),
                TREND_DAYS,
                f"{100 * rate:.1f}",
                f"{trend.counts.get('success', 0) + trend.counts.get('failed', 0):,}",
            ),
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
            preview_html(
                job.cron,
                job.timezone,
                timezone.now(),
                job.timing(),
                job.exclusions if isinstance(job.exclusions, list) else None,
            ),
        )
