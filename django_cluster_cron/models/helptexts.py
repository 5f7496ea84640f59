"""What the job's form says of its fields where a line is not enough: the schedule and its
exclusions, the policies; where a word for Celery alone would mislead: the help texts of the task,
its queue, priority and time limits (a job's task is a Celery task or a ``django.tasks`` task);
and the catch-up window, whose field says the formats it takes when it refuses one."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models

from ..validation import WINDOW_FORMAT

CRON = (
    "Cron: 5 fields (minute hour day-of-month month day-of-week), an optional 6th "
    "for seconds, or an alias such as @daily, evaluated in the job's time zone. Or an "
    "interval, '@every 90s' (units d, h, m, s; counted from the start, else 1970-01-01 "
    "UTC), once, '@at 2026-12-24T18:00:00' (a wall time in the job's zone, or with an offset), "
    "or at a solar event, '@solar sunrise 48.1374 11.5755' (event, latitude, longitude)."
)
EXCLUSIONS = (
    "Dates the schedule does not fire on, by the local date in the job's zone: "
    "'2026-12-24', a range '2026-12-27..2026-12-31', public holidays 'holidays:DE-BY' "
    "(the holidays extra)."
)
TASK = (
    "A Celery task's registered name ('billing.send_invoices'), or the import path of a "
    "django.tasks task: a function decorated with @task ('billing.tasks.send_invoices')."
)
QUEUE = (
    "Where runs wait for a worker. Celery: a queue name; empty uses the project's routing. "
    "django.tasks: one of the task's backend's QUEUES; empty uses the task's own queue."
)
PRIORITY = (
    "Empty: the task's own. Celery: the message priority, 0-255 (RabbitMQ 0-255, Redis 0-9). "
    "django.tasks: -100 to 100, higher first, on a backend that supports priorities."
)
# Celery enforces them; a django.tasks task has nothing that would, so they are refused there.
SOFT_LIMIT = "Seconds. Celery tasks only (refused for a django.tasks task)."
TIME_LIMIT = "Hard limit, seconds. Celery tasks only (refused for a django.tasks task)."
CATCHUP_WINDOW = "How far back missed slots are considered after an outage."
ON_WORKER_LOST = (
    "When the worker running this job dies mid-run: 'retry' runs it again as the "
    "next attempt if retries remain (the body may run twice: make it idempotent); 'fail' "
    "records the run failed and never runs it again."
)
ON_UNCERTAIN = (
    "When the database fails over to a server that had not received its last "
    "writes, a slot of those seconds may have run without the ledger knowing: 'skip' "
    "records it uncertain and never runs it again; 'run' runs it (it may run twice)."
)
MAX_RUNS = (
    "Finish after this many scheduled runs (runs the scheduler dispatched; "
    "manual runs and backfills do not count). Empty: no limit."
)
JITTER = (
    "Seconds: each slot is dispatched up to this much after its time, by an offset "
    "fixed per job and slot, so many jobs on one cron do not all fire at once. The run keeps "
    "its slot."
)
OVERLAP_POLICY = (
    "What a slot does while the job's previous run is still waiting or running "
    "(docs/how-to/policies.md has a timeline of each)."
)
MAX_BUFFERED = (
    "buffer_all: at most this many runs wait their turn; a slot past it is skipped (buffer "
    "full). Empty: the project's MAX_BUFFERED (1,000 unless set)."
)
CANCEL_INTERRUPTS = (
    "When a cancel of a running run is asked for, raise RunCancelled in its body at the "
    "heartbeat that brings it. Off: the body sees it as current_run().cancel_requested and "
    "stops when it checks."
)
CANCEL_GRACE = (
    "Seconds a running run has to stop after its cancel is asked for; then it is terminated "
    "(Celery's prefork, eventlet or gevent pools only: refused for a django.tasks task). "
    "Empty: never terminated."
)
PAUSE_AFTER_FAILURES = (
    "Pause the job after this many failed runs in a row (retries exhausted). Empty: never."
)


class WindowField(models.DurationField):  # type: ignore[type-arg]
    """A duration whose refusal of a value says the formats it takes (Django's form field says
    only "Enter a valid duration.")."""

    default_error_messages: ClassVar[dict[str, Any]] = {
        "invalid": "“%(value)s” is not a duration: give it " + WINDOW_FORMAT + ".",
    }

    def formfield(self, **kwargs: Any) -> Any:
        messages = {"invalid": f"Enter a duration {WINDOW_FORMAT}."}
        return super().formfield(**{"error_messages": messages, **kwargs})
