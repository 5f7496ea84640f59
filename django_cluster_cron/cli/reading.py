"""The verbs that only read: ``list``, ``describe``, ``next`` and ``runs``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, tzinfo
from typing import Any, cast

from django.db.models import CharField, F, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Concat
from django.utils import timezone

from ..core.catchup import PLAIN
from ..core.errors import ScheduleError
from ..describe import describe, preview
from ..models import JobDefinition, JobRun, RunStatus, not_ahead
from ..models.bulk import MomentText, moment_reader, through_index, uncompiled
from ..models.runs import ONE_PER_SLOT
from .common import (
    UTC,
    Refused,
    Reply,
    Usage,
    find_job,
    iso,
    job_data,
    left,
    parse_when,
    run_data,
    shown,
    state_of,
    table,
    version_of,
    zone_named,
    zone_or_utc,
)

# A job is late when its next run is this far in the past and nothing recorded it.
LATE_AFTER = timedelta(minutes=1)
# Statuses the list's --failing picks by the last run (with any job counting failures in a row).
FAILING = (RunStatus.FAILED, RunStatus.UNCERTAIN)
NEXT_MOST = 1000


# What ``list`` reads of each job (as rows, not model instances: a million of them stay cheap;
# moments as text, which reads in a fifth of the time).
LISTED = (
    "pk",
    "name",
    "cron",
    "timezone",
    "enabled",
    "pause_note",
    "next_run",
    "consecutive_failures",
    "last",
)


def _latest(now: datetime) -> QuerySet[JobRun]:
    """The runs of the outer query's job recorded by ``now``, newest slot first."""
    latest = not_ahead(JobRun.objects.filter(job=OuterRef("pk")), now)
    return cast("QuerySet[JobRun]", latest.order_by("-scheduled_for"))


def _listed(now: datetime) -> QuerySet[JobDefinition]:
    """Every live job with its last run's slot and status (``last``: the two as text, one look
    at the (job, slot) index per job), in one statement, soonest next run first."""
    latest = _latest(now)
    slot_and_status = Concat(
        MomentText("scheduled_for"), Value(" "), "status", output_field=CharField()
    )
    return cast(
        "QuerySet[JobDefinition]",
        JobDefinition.objects.annotate(
            next_run=MomentText("next_run_at"),
            last=Subquery(latest.annotate(last=slot_and_status).values("last")[:1]),
            # Ties by id: by name, PostgreSQL's collation-aware sort took three times as long.
        ).order_by(F("next_run_at").asc(nulls_last=True), "pk"),
    )


def _last(text: str) -> tuple[str, str]:
    """The last run's slot (as text) and status from ``last``."""
    slot, status = text.rsplit(" ", 1)
    return slot, status


def list_jobs(options: dict[str, Any]) -> Reply:
    now = timezone.now()
    jobs = _listed(now)
    if options["paused"]:
        jobs = jobs.filter(enabled=False)
    if options["failing"]:
        # The status on its own: MySQL refuses a LIKE on ``last`` (its parts' collations differ).
        jobs = jobs.annotate(last_status=Subquery(_latest(now).values("status")[:1])).filter(
            Q(consecutive_failures__gt=0) | Q(last_status__in=FAILING)
        )
    if options["late"]:
        jobs = jobs.filter(enabled=True, next_run_at__lt=now - LATE_AFTER)
    if options["search"]:
        term = options["search"]
        jobs = jobs.filter(Q(name__icontains=term) | Q(task__icontains=term))
    read = moment_reader()
    with uncompiled(), through_index(JobRun, ONE_PER_SLOT):
        found = list(jobs.values_list(*LISTED))
    if options["json"]:
        return Reply(_listed_data([dict(zip(LISTED, row, strict=True)) for row in found], read))
    # Many jobs share a zone, a next run (the top of the hour) and a schedule: each is worked
    # out once.
    zones: dict[str, tzinfo] = {}
    nexts: dict[tuple[str | None, str], tuple[str, str]] = {}
    lasts: dict[str, str] = {}
    rows = []
    for _pk, name, cron, zone, enabled, note, next_run, _failures, last_run in found:
        if enabled:
            shown_next = nexts.get((next_run, zone))
            if shown_next is None:
                moment = read(next_run)
                where = zones.get(zone) or zones.setdefault(zone, zone_or_utc(zone))
                shown_next = nexts[(next_run, zone)] = (shown(moment, where), left(moment, now))
            state = "enabled"
        else:
            shown_next = ("—", "—")
            state = f"paused: {note}" if note else "paused"
        if last_run is None:
            last = status = "—"
        else:
            slot, status = _last(last_run)
            last = lasts.get(slot) or lasts.setdefault(slot, left(read(slot), now))
        rows.append((*shown_next, last, status, name, describe(cron), zone, state))
    headers = ["NEXT", "LEFT", "LAST", "RESULT", "JOB", "SCHEDULE", "ZONE", "STATE"]
    return Reply({}, table(headers, rows) if rows else "No job matches.")


def _listed_data(
    found: list[dict[str, Any]], read: Callable[[str | None], datetime | None]
) -> dict[str, Any]:
    jobs = []
    for job in found:
        last_slot, status = _last(job["last"]) if job["last"] else (None, None)
        jobs.append(
            {
                "id": job["pk"],
                "name": job["name"],
                "schedule": job["cron"],
                "schedule_in_words": describe(job["cron"]),
                "timezone": job["timezone"],
                "state": "enabled" if job["enabled"] else "paused",
                "pause_note": job["pause_note"] or None,
                "next_run": iso(read(job["next_run"])) if job["enabled"] else None,
                "last_slot": iso(read(last_slot)),
                "last_status": status,
                "failures_in_a_row": job["consecutive_failures"],
            }
        )
    return {"jobs": jobs}


def describe_job(options: dict[str, Any]) -> Reply:
    job = find_job(options["job"])
    now = timezone.now()
    zone = zone_or_utc(job.timezone)
    try:
        found = preview(job.cron, job.timezone, now, 10, job.timing(), job.exclusions or None)
    except (ScheduleError, ValueError) as exc:
        raise Refused(f"The job's schedule cannot be read: {exc}") from None
    upcoming = [
        {"slot": iso(slot), "due": iso(due), "note": found.schedule.dst_note(slot) or None}
        for slot, due in found.upcoming
    ]
    runs = list(not_ahead(JobRun.objects.filter(job=job), now).order_by("-scheduled_for")[:10])
    alerts = _alerts(job)
    data = {
        "job": {"id": job.pk, **job_data(job, masked=True)},
        "version": version_of(job),
        "state": state_of(job),
        "pause_note": job.pause_note or None,
        "schedule_in_words": found.words,
        "next": upcoming,
        "excluded": [{"at": iso(at), "why": why} for at, why in found.excluded],
        "runs": [run_data(run) for run in runs],
        "alerts": alerts,
    }
    lines = [
        f"{job.name}  ({state_of(job)}{': ' + job.pause_note if job.pause_note else ''})",
        f"  task        {job.task}",
        f"  schedule    {job.cron}  ({found.words}), zone {job.timezone}",
        f"  policies    catch-up {job.catchup_policy}, overlap {job.overlap_policy}, "
        f"retries {job.max_retries}",
        "",
        "Next runs:",
        *(
            f"  {shown(due, zone)}"
            + (f"  [slot {shown(slot, zone)}]" if slot != due else "")
            + (f"  {note}" if (note := found.schedule.dst_note(slot)) else "")
            for slot, due in found.upcoming
        ),
        *(f"  left out: {shown(at, zone)}  {why}" for at, why in found.excluded),
        "",
        "Last runs:" if runs else "No runs yet.",
        *(
            f"  {run.pk:>8}  {shown(run.scheduled_for, zone)}  {run.status:<10} {_why(run)}"
            for run in runs
        ),
        "",
        "Would alert:" if alerts else "Nothing would alert.",
        *(f"  {alert}" for alert in alerts),
    ]
    return Reply(data, "\n".join(lines).rstrip())


def _why(run: JobRun) -> str:
    """Why a run ended as it did, in one line: its reason, or its error's first line."""
    return (run.reason or (run.error or "").split("\n")[0])[:80]


def _alerts(job: JobDefinition) -> list[str]:
    """What an operator would be told about this job now."""
    found = []
    if job.consecutive_failures:
        found.append(
            f"{job.consecutive_failures} failure(s) in a row"
            + (
                f"; paused at {job.pause_after_failures}"
                if job.pause_after_failures
                else "; it is not paused after failures (pause_after_failures is not set)"
            )
        )
    if job.enabled and job.next_run_at and job.next_run_at < timezone.now() - LATE_AFTER:
        found.append(f"late: its next run was due {left(job.next_run_at, timezone.now())}")
    return found


def next_times(options: dict[str, Any]) -> Reply:
    now = timezone.now()
    if options["expr"]:
        if options["job"]:
            raise Usage("Give a job or --expr, not both.")
        expression, zone_name = options["expr"], options["tz"] or "UTC"
        timing, exclusions = PLAIN, None
    elif options["job"]:
        job = find_job(options["job"])
        # The job's schedule is its zone's; --tz only shows its times in another.
        expression, zone_name = job.cron, job.timezone
        timing, exclusions = job.timing(), job.exclusions or None
    else:
        raise Usage("Give a job, or an expression with --expr (and --tz).")
    zone = zone_named(options["tz"] or zone_name)
    count = options["count"]
    start, end = now, None
    if options["between"]:
        first, last = options["between"]
        start = parse_when(first, now, zone, what="--between")
        end = parse_when(last, now, zone, what="--between")
    if end is not None and end <= start:
        raise Usage("--between: the end must be after the start.")
    if count < 1 or count > NEXT_MOST:
        raise Usage(f"--count must be from 1 to {NEXT_MOST:,}; got {count}.")
    try:
        many = NEXT_MOST if end else count
        # From A on, A included (a preview gives the fire times after the moment it is given).
        after = start - timedelta(microseconds=1) if end else start
        found = preview(expression, zone_name, after, many, timing, exclusions)
    except (ScheduleError, ValueError) as exc:
        field = getattr(exc, "field", None)
        raise Refused(f"{'--tz' if field == 'timezone' else 'schedule'}: {exc}") from None
    upcoming = [(slot, due) for slot, due in found.upcoming if end is None or due <= end]
    # --between stops at NEXT_MOST fire times: said, not hidden.
    truncated = end is not None and len(upcoming) == len(found.upcoming) == NEXT_MOST
    data = {
        "schedule": expression,
        "timezone": zone_name,
        "shown_in": str(zone),
        "truncated": truncated,
        "schedule_in_words": found.words,
        "fire_times": [
            {"slot": iso(slot), "due": iso(due), "note": found.schedule.dst_note(slot) or None}
            for slot, due in upcoming
        ],
        "excluded": [{"at": iso(at), "why": why} for at, why in found.excluded],
    }
    lines = [f"{expression}  ({found.words}), zone {zone_name}"]
    lines += [
        f"  {shown(due, zone)}  {shown(due, UTC)}"
        + (f"  {note}" if (note := found.schedule.dst_note(slot)) else "")
        for slot, due in upcoming
    ]
    if not upcoming:
        lines.append("  no fire time" + (" in that range" if end else ""))
    if truncated:
        lines.append(f"  … the first {NEXT_MOST:,} only: narrow the range")
    lines += [f"  left out: {shown(at, zone)}  {why}" for at, why in found.excluded]
    return Reply(data, "\n".join(lines))


def list_runs(options: dict[str, Any]) -> Reply:
    now = timezone.now()
    runs = not_ahead(JobRun.objects.prefetch_related("job"), now)  # a join: see the admin's
    zone: tzinfo = UTC
    if options["job"]:
        job = find_job(options["job"], deleted=True)
        runs = runs.filter(job=job)
        zone = zone_or_utc(job.timezone)
    if options["status"]:
        known = set(RunStatus.values)
        wrong = [s for s in options["status"] if s not in known]
        if wrong:
            raise Refused(
                f"--status: {', '.join(map(repr, wrong))} is not a run status; give one of "
                f"{', '.join(RunStatus.values)}."
            )
        runs = runs.filter(status__in=options["status"])
    if options["since"]:
        runs = runs.filter(scheduled_for__gte=parse_when(options["since"], now, what="--since"))
    limit = options["limit"]
    if not 1 <= limit <= 10_000:
        raise Usage(f"--limit must be from 1 to 10,000; got {limit}.")
    found = list(runs.order_by("-scheduled_for")[:limit])
    data = {"runs": [run_data(run) for run in found]}
    rows = [
        [
            str(run.pk),
            shown(run.scheduled_for, zone),
            run.job.name,
            run.status,
            run.trigger,
            str(run.attempt),
            "—" if run.duration is None else f"{run.duration.total_seconds():.1f}s",
            _why(run),
        ]
        for run in found
    ]
    headers = ["RUN", "SLOT", "JOB", "STATUS", "TRIGGER", "TRY", "TOOK", "WHY"]
    return Reply(data, table(headers, rows) if rows else "No run matches.")
