"""Public entry point of the pure scheduling core (importable without Django settings).

>>> from datetime import datetime, timezone
>>> from django_cluster_cron.schedule import fire_times
>>> fire_times("30 2 * * *", "America/New_York", datetime(2024, 3, 9, 12, tzinfo=timezone.utc), 1)
[datetime.datetime(2024, 3, 10, 7, 0, tzinfo=datetime.timezone.utc)]
"""

from __future__ import annotations

from .core.catchup import (
    CatchupPolicy,
    CatchupRules,
    PlannedRun,
    SlotPlan,
    Trigger,
    UnrecordedMisses,
    parse_policy,
    plan_slots,
)
from .core.cron import ALIASES, CronSchedule
from .core.errors import ScheduleError
from .core.interval import IntervalSchedule
from .core.kinds import Schedule
from .core.oneoff import OneOffSchedule
from .core.schedules import fire_times, parse, validate_schedule, validate_timezone
from .core.slots import parse_task_id, task_id_for
from .core.solar import SolarSchedule
from .core.timezones import available_timezones

# The name of earlier releases: it accepts every kind of schedule now.
validate_cron = validate_schedule

__all__ = [
    "ALIASES",
    "CatchupPolicy",
    "CatchupRules",
    "CronSchedule",
    "IntervalSchedule",
    "OneOffSchedule",
    "PlannedRun",
    "Schedule",
    "ScheduleError",
    "SlotPlan",
    "SolarSchedule",
    "Trigger",
    "UnrecordedMisses",
    "available_timezones",
    "fire_times",
    "parse",
    "parse_policy",
    "parse_task_id",
    "plan_slots",
    "task_id_for",
    "validate_cron",
    "validate_schedule",
    "validate_timezone",
]
