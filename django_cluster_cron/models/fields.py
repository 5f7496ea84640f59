"""Groups of ``JobDefinition`` fields, each named once: what defines a job, what its audit trail
records, what restarts its schedule, what the cluster writes behind a save's back."""

from __future__ import annotations

# What defines a job besides its name: what a person types in the admin or the API, and what code
# declares (and owns) for a job declared in code. Operators keep ``enabled``/``pause_note``.
DEFINITION_FIELDS = (
    "description",
    "cron",
    "timezone",
    "exclusions",
    "task",
    "args",
    "kwargs",
    "queue",
    "priority",
    "expires",
    "catchup_policy",
    "catchup_window",
    "overlap_policy",
    "max_buffered",
    "max_retries",
    "retry_backoff",
    "retry_backoff_max",
    "on_worker_lost",
    "on_uncertain",
    "cancel_interrupts",
    "cancel_grace",
    "soft_time_limit",
    "time_limit",
    "start_at",
    "end_at",
    "max_runs",
    "jitter",
    "pause_after_failures",
    "pieces",
    "pieces_planner",
    "max_failed_pieces",
    "max_parallel_pieces",
    "pieces_success",
    "pieces_success_count",
    "pieces_required",
    "on_complete",
    "retention",
    "keep_last",
)
# What a change is recorded for; bookkeeping (next_run_at, the watermark, counters) is not.
AUDITED_FIELDS = ("name", "enabled", "pause_note", *DEFINITION_FIELDS, "deleted_at")
# The schedule-defining fields: a change to any of them restarts the job's schedule from now.
SCHEDULE_FIELDS = (
    "cron",
    "timezone",
    "exclusions",
    "enabled",
    "deleted_at",
    "start_at",
    "end_at",
    "jitter",
    "max_runs",
)
# What a run's message carries from its job (routing, expiry, limits) and the policy a run
# recorded ahead was decided under: with the schedule fields, a change to any of them withdraws
# the runs recorded ahead of their time.
AHEAD_FIELDS = (
    *SCHEDULE_FIELDS,
    "queue",
    "priority",
    "expires",
    "soft_time_limit",
    "time_limit",
    "overlap_policy",
)
# The scheduler's bookkeeping: the watermark and the next due time.
BOOKKEEPING_FIELDS = ("next_run_at", "last_scheduled_at")
# Written by the scheduler and workers with conditional UPDATEs; a save writes them only when it
# sets them itself.
CLUSTER_FIELDS = (*BOOKKEEPING_FIELDS, "scheduled_runs", "consecutive_failures")
# Columns planning and recording never read: not loaded for a batch of due jobs (thousands).
NOT_PLANNED = (
    "description",
    "pause_note",
    "code_origin",
    "created_at",
    "updated_at",
    "retention",
    "keep_last",
)
