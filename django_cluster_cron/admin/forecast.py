"""The "coming dispatches" page: every live job's dispatch times over the next hour or day, as
a histogram, so an operator sees the 09:00:00 pile-up before it happens."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from ..core.errors import ScheduleError
from ..core.forecast import forecast
from ..core.kinds import Schedule
from ..core.timing import SlotTiming
from ..models import JobDefinition, JobRun, RunStatus
from .charts import forecast_chart
from .display import UTC, moment

# Which jobs are drawn: the first this many by next run (the page says when there are more).
FORECAST_JOBS = 5_000
# window name -> (length, buckets, what a bucket is in words)
WINDOWS = {
    "hour": (timedelta(hours=1), 60, "minute"),
    "day": (timedelta(days=1), 96, "quarter hour"),
}


def _plans(
    jobs: list[JobDefinition], ahead: dict[int, int]
) -> Iterator[tuple[str, Schedule, SlotTiming, int | None]]:
    for job in jobs:
        try:
            schedule = job.schedule
        except ScheduleError:  # a bad row is parked by the scheduler; it dispatches nothing
            continue
        # Runs recorded ahead are counted by max_runs already, and dispatched yet to come.
        left = job.max_runs
        if left is not None:
            left = max(left - job.scheduled_runs + ahead.get(job.pk, 0), 0)
        yield job.name, schedule, job.timing(), left


def forecast_view(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    if not model_admin.has_view_or_change_permission(request):
        raise PermissionDenied
    window = request.GET.get("window", "hour")
    if window not in WINDOWS:
        window = "hour"
    span, buckets, bucket_words = WINDOWS[window]
    now = timezone.now()
    # Buckets start on a round time (a whole minute, a quarter hour); what is already past in the
    # first one is not counted.
    width = span / buckets
    start = datetime.fromtimestamp(
        now.timestamp() // width.total_seconds() * width.total_seconds(), tz=UTC
    )
    end = start + span
    # The due index answers this: jobs with a dispatch due before the window ends, and those
    # whose next run is recorded ahead (their next_run_at is the instant after it).
    recorded_ahead = JobRun.objects.filter(status=RunStatus.PENDING, due_at__gt=now)
    candidates = list(
        JobDefinition.objects.filter(enabled=True)
        .filter(Q(next_run_at__lte=end) | Q(pk__in=recorded_ahead.values("job_id")))
        .order_by("next_run_at")[: FORECAST_JOBS + 1]
    )
    more = len(candidates) > FORECAST_JOBS
    drawn = candidates[:FORECAST_JOBS]
    ahead = dict(
        recorded_ahead.filter(job_id__in=[job.pk for job in drawn if job.max_runs is not None])
        .values("job_id")
        .annotate(n=Count("pk"))
        .values_list("job_id", "n")
        .order_by()
    )
    found = forecast(_plans(drawn, ahead), start, end, buckets, after=now)
    busiest = max(found.buckets, key=lambda bucket: bucket.count, default=None)
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": f"Dispatches in the next {window}",
        "window": window,
        "windows": list(WINDOWS),
        "found": found,
        "more_jobs": more,
        "job_cap": FORECAST_JOBS,
        "chart": forecast_chart(found, UTC),
        "start": moment(found.start),
        "end": moment(found.end),
        "busiest_second": moment(found.busiest_second),
        "busiest_bucket": busiest if busiest and busiest.count else None,
        "busiest_bucket_at": moment(busiest.start) if busiest else "—",
        "bucket_words": bucket_words,
        "jobs_count": f"{found.jobs:,}",
        "total": f"{found.total:,}",
        "busiest_bucket_count": f"{busiest.count:,}" if busiest else "0",
        "busiest_second_count": f"{found.busiest_count:,}",
    }
    return TemplateResponse(
        request, "admin/django_cluster_cron/jobdefinition/forecast.html", context
    )
