"""A job as a monitor, and the jobs a monitor cannot follow.

The monitor is made from the job as it is when its run starts or ends, so an edited schedule,
time zone, jitter or time limit reaches the service with the next check-in (services that take a
configuration with each check-in update the monitor then). A job whose schedule has no crontab
(:mod:`.crontab`) is still reported: its check-ins go without a schedule, so a monitor someone
made by hand in the service keeps receiving them. It is said once per job and process
(``monitors.unmonitorable``), and :func:`unmonitorable_jobs` lists every such job.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import timedelta

from ...models import JobDefinition
from .base import Monitor
from .crontab import schedule_for, slug_for
from .specs import Watch, watches

logger = logging.getLogger("django_cluster_cron.monitors")


def monitor_for(job: JobDefinition, watch: Watch) -> Monitor:
    crontab = schedule_for(job.cron, job.exclusions)
    limit = job.time_limit or job.soft_time_limit
    return Monitor(
        slug=slug_for(watch.slug, job.name, job.pk or 0),
        job=job.name,
        job_id=job.pk or 0,
        cron=job.cron,
        crontab=crontab.text,
        interval=crontab.interval,
        problem=crontab.problem,
        timezone=job.timezone,
        margin=watch.margin + timedelta(seconds=(job.jitter or 0) + crontab.shift),
        max_runtime=timedelta(seconds=limit) if limit else watch.max_runtime,
    )


class _Warned:
    """(watch, job, schedule) already warned about in this process: one line each, not one per
    run. A changed schedule that still has no crontab is said again."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: set[tuple[str, int, str]] = set()

    def first(self, key: tuple[str, int, str]) -> bool:
        with self.lock:
            if key in self.seen:
                return False
            self.seen.add(key)
            return True


_warned = _Warned()


def warn_once(watch: Watch, monitor: Monitor) -> None:
    if not watch.sink.uses_schedule or monitor.has_schedule:
        return
    if _warned.first((watch.label, monitor.job_id, monitor.cron)):
        logger.warning(
            "monitors.unmonitorable job=%s slug=%s sink=%s: %s; its check-ins are sent "
            "without a schedule",
            monitor.job,
            monitor.slug,
            watch.label,
            monitor.problem,
        )


@dataclass(frozen=True)
class Unmonitorable:
    job: str
    sink: str
    reason: str


def unmonitorable_jobs() -> list[Unmonitorable]:
    """The live jobs a configured sink watches but cannot give a schedule to, with the reason
    (an empty list when ``MONITORS`` is empty). One query."""
    schedule_watches = [w for w in watches() if w.sink.uses_schedule]
    if not schedule_watches:
        return []
    found: list[Unmonitorable] = []
    rows = JobDefinition.objects.order_by("name").values_list("name", "cron", "exclusions")
    for name, cron, exclusions in rows:
        crontab = schedule_for(cron, exclusions)
        if crontab.text is not None or crontab.interval is not None:
            continue
        found.extend(
            Unmonitorable(name, w.label, crontab.problem)
            for w in schedule_watches
            if w.watches(name)
        )
    return found
