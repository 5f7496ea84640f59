"""The app's tables: jobs (:mod:`.jobs`; what a save of one does around writing its row in
:mod:`.job_saving`, its validation in :mod:`.job_rules`, its pieces' settings in
:mod:`.pieces`), their runs (:mod:`.runs`) and a run's pieces (:mod:`.pieces`), what changed
jobs (:mod:`.changes`) and what the scheduler nodes coordinate through (:mod:`.cluster`); the
choices of a job's policies (:mod:`.choices`), the named groups of its fields (:mod:`.fields`) and
the help texts of those whose meaning depends on the task's execution system (:mod:`.helptexts`).

Import them from here: ``from django_cluster_cron.models import JobDefinition, JobRun``.
"""

from .changes import JobChange, JobSync
from .choices import (
    CatchupPolicy,
    OverlapPolicy,
    UncertainPolicy,
    WorkerLostPolicy,
    catchup_limits,
    default_catchup_policy,
    default_catchup_window,
    default_overlap_policy,
)
from .cluster import ClusterCounter, ClusterStatus, NodeReport, SchedulerLease
from .fields import (
    AHEAD_FIELDS,
    AUDITED_FIELDS,
    BOOKKEEPING_FIELDS,
    CLUSTER_FIELDS,
    DEFINITION_FIELDS,
    SCHEDULE_FIELDS,
)
from .jobs import JobDefinition, JobQuerySet, LiveJobManager
from .pieces import (
    CLAIMABLE_PIECE_STATUSES,
    COMPLETION,
    FINAL_PIECE_STATUSES,
    IN_FLIGHT_PIECE_STATUSES,
    MAX_PIECES,
    OPEN_PIECE_STATUSES,
    JobPiece,
    PieceStatus,
    PieceSuccess,
)
from .retention import RunSummary
from .runs import (
    ACTIVE_STATUSES,
    EXECUTING_STATUSES,
    FINAL_STATUSES,
    SCHEDULED_TRIGGERS,
    WAITING_STATUSES,
    JobRun,
    PieceInfo,
    RunCancelled,
    RunStatus,
    RunTrigger,
    not_ahead,
)

__all__ = [
    "ACTIVE_STATUSES",
    "AHEAD_FIELDS",
    "AUDITED_FIELDS",
    "BOOKKEEPING_FIELDS",
    "CLAIMABLE_PIECE_STATUSES",
    "CLUSTER_FIELDS",
    "COMPLETION",
    "DEFINITION_FIELDS",
    "EXECUTING_STATUSES",
    "FINAL_PIECE_STATUSES",
    "FINAL_STATUSES",
    "IN_FLIGHT_PIECE_STATUSES",
    "MAX_PIECES",
    "OPEN_PIECE_STATUSES",
    "SCHEDULED_TRIGGERS",
    "SCHEDULE_FIELDS",
    "WAITING_STATUSES",
    "CatchupPolicy",
    "ClusterCounter",
    "ClusterStatus",
    "JobChange",
    "JobDefinition",
    "JobPiece",
    "JobQuerySet",
    "JobRun",
    "JobSync",
    "LiveJobManager",
    "NodeReport",
    "OverlapPolicy",
    "PieceInfo",
    "PieceStatus",
    "PieceSuccess",
    "RunCancelled",
    "RunStatus",
    "RunSummary",
    "RunTrigger",
    "SchedulerLease",
    "UncertainPolicy",
    "WorkerLostPolicy",
    "catchup_limits",
    "default_catchup_policy",
    "default_catchup_window",
    "default_overlap_policy",
    "not_ahead",
]
