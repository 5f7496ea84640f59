"""N equal jobs for each system, the three schedulers built as their real processes build them,
and the broker probes the workloads share.

The job definition is the same everywhere: task ``tests.add`` with args ``[1, 2]`` on a cron with
minute granularity (celery's ``crontab`` has no seconds field):

- ``IDLE``: ``0 * 1 1 *`` (every hour on 1 January): not due during a benchmark, and its hour
  field is ``*`` so DatabaseScheduler loads it (it skips loading crontabs whose hour is far from
  the current one; jobs with a fixed hour would make its reload smaller, not its tick O(1)).
- :func:`due_cron`: ``M H * * *`` naming the minute just past, set up with its last run one
  second before that slot, so every job owes exactly one slot now (and no second one however long
  the burst takes): the burst.

Call :func:`_env.boot` first (Django, the database and a throwaway Redis).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

IDLE = "0 * 1 1 *"
TASK = "tests.add"
ARGS = [1, 2]
QUEUE = "celery"  # Celery's default queue: where all three systems publish these jobs
BEAT_MAX_INTERVAL = 5.0  # DatabaseScheduler's own default; given to redbeat too (its is 300 s)


def now() -> datetime:
    return datetime.now(timezone.utc)


def minute_floor(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def due_cron() -> tuple[str, datetime]:
    """A daily cron whose slot is the minute just past, and that slot."""
    slot = minute_floor(now()) - timedelta(minutes=1)
    return f"{slot.minute} {slot.hour} * * *", slot


def last_run(cron: str) -> datetime:
    """When each job 'last ran': just before its slot for a due cron, now for an idle one."""
    if cron == IDLE:
        return now()
    minute, hour = (int(x) for x in cron.split()[:2])
    slot = minute_floor(now()).replace(hour=hour, minute=minute)
    if slot > now():
        slot -= timedelta(days=1)
    return slot - timedelta(seconds=1)


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def quiet() -> None:
    """Keep the schedulers' per-run INFO lines off the tables (warnings still show)."""
    import logging

    for name in ("django_cluster_cron", "celery", "redbeat", "django_celery_beat"):
        logging.getLogger(name).setLevel(logging.WARNING)


# -- the broker --------------------------------------------------------------------------------


_client: Any = None


def redis_client() -> Any:
    global _client
    if _client is None:
        import redis

        _client = redis.Redis.from_url(os.environ["REDIS_URL"])
    return _client


def queue_length() -> int:
    return int(redis_client().llen(QUEUE))


def clear_queue() -> None:
    redis_client().delete(QUEUE)


def redis_commands() -> int:
    """Commands the throwaway Redis has processed so far (this call's own INFO included)."""
    return int(redis_client().info("stats")["total_commands_processed"])


def celery_app() -> Any:
    from tests.testapp.celery import app

    return app


# -- ours --------------------------------------------------------------------------------------


def clear_ours() -> None:
    from django_cluster_cron.models import JobChange, JobDefinition, JobRun, SchedulerLease

    # Raw deletes: the ORM's cascade collection would dominate at 100,000 rows. Every table
    # that points at a job goes first (SQLite and MySQL enforce the foreign keys).
    JobRun.objects.all()._raw_delete(JobRun.objects.db)
    JobChange.objects.all()._raw_delete(JobChange.objects.db)
    JobDefinition.all_objects.all()._raw_delete(JobDefinition.objects.db)
    SchedulerLease.objects.all().delete()


def setup_ours(
    n: int, cron: str, task: str = TASK, args: list[Any] = ARGS, last: datetime | None = None
) -> float:
    """Create N jobs (bulk, as an import would); return the seconds it took."""
    from django_cluster_cron.models import JobDefinition
    from django_cluster_cron.schedule import fire_times

    clear_ours()
    started = time.perf_counter()
    last = last or last_run(cron)
    next_run = fire_times(cron, "UTC", last, 1)[0]
    JobDefinition.objects.bulk_create(
        (
            JobDefinition(
                name=f"bench-{i}",
                cron=cron,
                timezone="UTC",
                task=task,
                args=args,
                catchup_policy="all",
                last_scheduled_at=last,
                next_run_at=next_run,
            )
            for i in range(n)
        ),
        batch_size=2000,
    )
    return time.perf_counter() - started


def build_ours(node: str, lease: str | None = None) -> Any:
    """Our scheduler; ``lease="database"`` takes the database lease whatever the settings say."""
    from django_cluster_cron.scheduler import build_scheduler
    from django_cluster_cron.testing import NoWait

    if lease == "database":
        from django_cluster_cron.leases.database import DatabaseBackend

        return build_scheduler(node_id=node, sleeper=NoWait(), backend=DatabaseBackend())
    return build_scheduler(node_id=node, sleeper=NoWait())


# -- django-celery-beat ------------------------------------------------------------------------


def _crontab(cron: str) -> Any:
    from django_celery_beat.models import CrontabSchedule

    minute, hour, dom, month, dow = cron.split()
    schedule, _ = CrontabSchedule.objects.get_or_create(
        minute=minute,
        hour=hour,
        day_of_month=dom,
        month_of_year=month,
        day_of_week=dow,
        timezone="UTC",
    )
    return schedule


def clear_beat() -> None:
    from django_celery_beat.models import PeriodicTask

    PeriodicTask.objects.all()._raw_delete(PeriodicTask.objects.db)


def setup_beat(
    n: int, cron: str, task: str = TASK, args: list[Any] = ARGS, last: datetime | None = None
) -> float:
    """Create N PeriodicTasks sharing one CrontabSchedule (bulk: beat's fastest way in); each
    last ran at ``last`` (default: :func:`last_run`)."""
    import json

    from django_celery_beat.models import PeriodicTask, PeriodicTasks

    clear_beat()
    started = time.perf_counter()
    schedule = _crontab(cron)
    last = last or last_run(cron)
    PeriodicTask.objects.bulk_create(
        (
            PeriodicTask(
                name=f"bench-{i}",
                task=task,
                crontab=schedule,
                args=json.dumps(args),
                last_run_at=last,
            )
            for i in range(n)
        ),
        batch_size=2000,
    )
    PeriodicTasks.update_changed()  # bulk_create sends no signal: tell beat, as save() would
    return time.perf_counter() - started


def build_beat() -> Any:
    from django.db import close_old_connections
    from django_celery_beat.schedulers import DatabaseScheduler

    close_old_connections()
    return DatabaseScheduler(app=celery_app(), max_interval=BEAT_MAX_INTERVAL)


def beat_step(scheduler: Any) -> float:
    """One pass of celery beat's service loop (celery.beat.Service.start), without the sleep."""
    interval = float(scheduler.tick())
    if scheduler.should_sync():
        scheduler._do_sync()
    return interval


# -- celery-redbeat ----------------------------------------------------------------------------


def redbeat_app() -> Any:
    app = celery_app()
    app.conf.redbeat_redis_url = os.environ["REDIS_URL"]  # its default key prefix "redbeat:"
    return app


def clear_redbeat() -> None:
    client = redis_client()
    keys = list(client.scan_iter("redbeat:*", count=10_000))
    for start in range(0, len(keys), 10_000):
        client.delete(*keys[start : start + 10_000])


def setup_redbeat(
    n: int, cron: str, task: str = TASK, args: list[Any] = ARGS, last: datetime | None = None
) -> float:
    """Save N RedBeatSchedulerEntry objects: one HSET/HSETNX/ZADD pipeline each (its API)."""
    from celery.schedules import crontab
    from redbeat import RedBeatSchedulerEntry

    app = redbeat_app()
    clear_redbeat()
    minute, hour, dom, month, dow = cron.split()
    schedule = crontab(minute, hour, dow, dom, month, app=app)
    last = last or last_run(cron)
    started = time.perf_counter()
    for i in range(n):
        RedBeatSchedulerEntry(
            f"bench-{i}", task, schedule, args=args, app=app, last_run_at=last
        ).save()
    return time.perf_counter() - started


def build_redbeat(lock: bool = True) -> Any:
    """A RedBeatScheduler holding its lock, as ``celery beat -S redbeat.RedBeatScheduler``."""
    from redbeat import RedBeatScheduler

    app = redbeat_app()
    redis_client().delete("redbeat::lock")
    scheduler = RedBeatScheduler(app=app, max_interval=BEAT_MAX_INTERVAL)
    if lock:
        take_redbeat_lock(scheduler)
    return scheduler


def take_redbeat_lock(scheduler: Any) -> None:
    """What redbeat does on ``beat_init`` (its lock's token lives in the calling thread)."""
    from redbeat.schedulers import acquire_distributed_beat_lock

    acquire_distributed_beat_lock(sender=SimpleNamespace(scheduler=scheduler))


def close_scheduler(scheduler: Any) -> None:
    try:
        scheduler.close()
    except Exception as exc:  # a closing peer must not abort the other measurements
        print(f"  (closing {type(scheduler).__name__}: {exc})")


def wait_for_queue(n: int, cap: float, step: Callable[[], Any]) -> tuple[float, bool]:
    """Call ``step`` until N messages are in the queue; return (seconds, finished)."""
    started = time.perf_counter()
    while queue_length() < n:
        if time.perf_counter() - started > cap:
            return time.perf_counter() - started, False
        step()
    return time.perf_counter() - started, True
