"""The choices of a job's policies, and their project-wide defaults (settings)."""

from __future__ import annotations

from datetime import timedelta

from django.db import models

from ..conf import app_settings
from ..core.catchup import CatchupPolicy as CorePolicy


class CatchupPolicy(models.TextChoices):
    ALL = CorePolicy.ALL.value, "all — run every missed slot in the window (capped)"
    LATEST = CorePolicy.LATEST.value, "latest — run only the most recent missed slot"
    NONE = CorePolicy.NONE.value, "none — run only slots that are on time"


class OverlapPolicy(models.TextChoices):
    ALLOW = "allow", "allow — runs may overlap"
    SKIP = "skip", "skip — skip a slot while the previous run is queued or running"
    BUFFER_ONE = "buffer_one", "buffer one — keep at most one run waiting"
    BUFFER_ALL = "buffer_all", "buffer all — runs wait their turn, one at a time in slot order"
    CANCEL_OTHER = (
        "cancel_other",
        "cancel other — ask the running run to stop; the new one starts once it has",
    )
    TERMINATE_OTHER = (
        "terminate_other",
        "terminate other — terminate the running run; the new one starts once it has stopped",
    )


class WorkerLostPolicy(models.TextChoices):
    RETRY = "retry", "retry — run it again if retries remain (at-least-once)"
    FAIL = "fail", "fail — never run it again (at-most-once)"


class UncertainPolicy(models.TextChoices):
    """What to do with a slot whose fate the ledger lost (the database failed over to a server
    that had not received its last writes): the run may or may not have executed."""

    SKIP = "skip", "skip — record it uncertain, never run it again (at-most-once)"
    RUN = "run", "run — run it (again): it may have run before (at-least-once)"


def default_catchup_policy() -> str:
    return app_settings.CATCHUP_POLICY


def default_catchup_window() -> timedelta:
    return app_settings.CATCHUP_WINDOW


def default_overlap_policy() -> str:
    return app_settings.OVERLAP_POLICY


def default_max_buffered() -> int:
    return app_settings.MAX_BUFFERED


def catchup_limits() -> tuple[int, timedelta, int]:
    """The project's catch-up cap, on-time grace and missed record limit (settings)."""
    return app_settings.CATCHUP_CAP, app_settings.ON_TIME_GRACE, app_settings.MISSED_RECORD_LIMIT
