"""The verbs that act: ``trigger``, ``backfill``, ``pause``, ``resume``, ``retry`` and ``cancel``
(an action's refusal, ``ActionRefused``, is the command's exit 1), each through
the action the admin's button calls (``django_cluster_cron.actions``, the job's own ``pause`` and
``resume``), under ``--by`` in the job's audit trail."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from .. import actions, audit
from ..dbtime import database_now
from ..models import FINAL_STATUSES, JobRun, RunStatus
from .common import (
    Refused,
    Reply,
    Usage,
    find_job,
    find_run,
    iso,
    json_option,
    parse_when,
    run_data,
    shown,
    state_of,
    zone_named,
)

# How often ``trigger --wait`` looks at its run.
WAIT_POLL = 0.5
# Most failed runs one ``retry --job`` sends again.
RETRY_MOST = 1000


def _acting(options: dict[str, Any]) -> Any:
    return audit.acting(options["by"], via="cli", note=options.get("note") or None)


def trigger(options: dict[str, Any], *, echo: Callable[[str], None]) -> Reply:
    job = find_job(options["job"])
    kwargs = None
    if options["kwargs"] is not None:
        kwargs = json_option(options["kwargs"], "kwargs", where="--kwargs")
    with _acting(options):
        run = actions.run_now(
            job,
            by=f"cli:{options['by']}",
            overlap_policy=options["overlap_policy"],
            kwargs=kwargs,
        )
    said = f"Run {run.pk} of {job.name} for {shown(run.scheduled_for)}: {run.status}"
    if run.reason:
        said += f" ({run.reason})"
    if not options["wait"]:
        return Reply({"run": run_data(run)}, said)
    echo(said + "; waiting for it to end…")
    deadline = time.monotonic() + options["timeout"]
    while run.status not in FINAL_STATUSES:
        if time.monotonic() >= deadline:
            return Reply(
                {"run": run_data(run), "timed_out": True},
                f"Run {run.pk} is still {run.status} after {options['timeout']:g} s.",
                code=1,
            )
        time.sleep(WAIT_POLL)
        run.refresh_from_db()
    ended = f"Run {run.pk} ended {run.status}"
    if run.duration is not None:
        ended += f" after {run.duration.total_seconds():.1f} s"
    if run.error:
        ended += f": {run.error.splitlines()[0]}"
    elif run.reason:
        ended += f" ({run.reason})"
    return Reply(
        {"run": run_data(run), "timed_out": False},
        ended,
        code=0 if run.status == RunStatus.SUCCESS else 1,
    )


def backfill(options: dict[str, Any]) -> Reply:
    job = find_job(options["job"])
    zone = zone_named(job.timezone)
    now = database_now()  # what the backfill's own "not in the future" compares with
    start = parse_when(options["from"], now, zone, what="--from")
    end = parse_when(options["to"], now, zone, what="--to")
    reprocess = options["reprocess"]
    if options["dry_run"]:
        plan = actions.plan_backfill(job, start, end, reprocess)
        runs: list[JobRun] = []
    else:
        with _acting(options):
            runs = actions.backfill(
                job,
                start,
                end,
                by=f"cli:{options['by']}",
                overlap_policy=options["overlap_policy"],
                reprocess=reprocess,
            )
    span = f"({shown(start, zone)}, {shown(end, zone)}]"
    if options["dry_run"]:
        lines = [
            f"{job.name}: {len(plan.slots)} slot(s) without a run in {span} would get one"
            + (f"; {len(plan.again)} run(s) would run again ({reprocess})" if plan.again else "")
            + f"; {plan.existing} slot(s) have a run already."
            + (" More than the most a backfill makes: narrow the range." if plan.truncated else ""),
            *(f"  new    {shown(slot, zone)}" for slot in plan.slots),
            *(
                f"  again  {shown(r.scheduled_for, zone)}  run {r.pk} ({r.status})"
                for r in plan.again
            ),
        ]
        data = {
            "dry_run": True,
            "slots": [iso(slot) for slot in plan.slots],
            "again": [run_data(run) for run in plan.again],
            "existing": plan.existing,
            "truncated": plan.truncated,
        }
        return Reply(data, "\n".join(lines))
    lines = [f"{job.name}: {len(runs)} run(s) for {span}:"]
    lines += [f"  run {r.pk:<8} {shown(r.scheduled_for, zone)}  {r.status}" for r in runs]
    return Reply({"dry_run": False, "runs": [run_data(run) for run in runs]}, "\n".join(lines))


def pause(options: dict[str, Any]) -> Reply:
    job = find_job(options["job"])
    already = not job.enabled
    with _acting(options):
        job.pause(options["note"] or "")
    said = (
        f"{job.name} was paused already; its note is now {job.pause_note!r}."
        if already
        else (f"Paused {job.name}" + (f": {job.pause_note}" if job.pause_note else "."))
    )
    return Reply({"job": _job_state(job), "changed": not already}, said)


def resume(options: dict[str, Any]) -> Reply:
    job = find_job(options["job"])
    if job.enabled:
        return Reply({"job": _job_state(job), "changed": False}, f"{job.name} is not paused.")
    with _acting(options):
        job.resume()
    job.refresh_from_db()
    return Reply(
        {"job": _job_state(job), "changed": True},
        f"Resumed {job.name}; it runs from its next slot, {shown(job.next_run_at)} (the slots "
        "that fell while it was paused are not caught up).",
    )


def _job_state(job: Any) -> dict[str, Any]:
    return {
        "id": job.pk,
        "name": job.name,
        "state": state_of(job),
        "pause_note": job.pause_note or None,
    }


def retry(options: dict[str, Any]) -> Reply:
    if options["run"] is not None:
        if options["job"] or options["since"]:
            raise Usage("Give a run, or --job (with --failed and --since), not both.")
        runs = [find_run(options["run"])]
    elif options["job"]:
        if not options["failed"]:
            raise Usage("retry --job retries failed runs only: add --failed.")
        job = find_job(options["job"], deleted=True)
        chosen = JobRun.objects.select_related("job").filter(job=job, status=RunStatus.FAILED)
        if options["since"]:
            since = parse_when(options["since"], timezone.now(), what="--since")
            chosen = chosen.filter(scheduled_for__gte=since)
        runs = list(chosen.order_by("scheduled_for")[: RETRY_MOST + 1])
        if len(runs) > RETRY_MOST:
            raise Refused(f"More than {RETRY_MOST:,} failed runs match: narrow them with --since.")
    else:
        raise Usage("Give a run id, or --job JOB --failed [--since …].")
    retried, refused = [], []
    with _acting(options):
        for run in runs:
            try:
                retried.append(actions.retry(run))
            except actions.ActionRefused as exc:
                refused.append(str(exc))
    if options["run"] is not None and refused:
        raise Refused(refused[0])
    lines = [f"Run {run.pk}: attempt {run.attempt}, {run.status}." for run in retried]
    lines += refused
    if not runs:
        lines = ["No failed run matches."]
    return Reply(
        {"runs": [run_data(run) for run in retried], "refused": refused},
        "\n".join(lines),
        code=1 if refused and not retried else 0,
    )


def cancel(options: dict[str, Any]) -> Reply:
    run = find_run(options["run"])
    with _acting(options):
        run = actions.cancel(
            run, reason=options["reason"] or "cancelled by an operator", by=options["by"]
        )
    return Reply({"run": run_data(run)}, actions.cancel_outlook(run))
