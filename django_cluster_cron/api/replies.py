"""Who may read what an action answers, and the health report: the cluster status permission,
and the two forms of an operator action's answer (the whole job or run, or its state)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import permissions, serializers
from rest_framework.request import Request

from ..models import JobDefinition, JobRun
from ..ops.views import DETAILS_PERMISSION
from .serializers import JobSerializer, JobStateSerializer, RunSerializer, RunStateSerializer

APP = "django_cluster_cron"


class ClusterStatusPermission(permissions.BasePermission):
    """Logged in, with the permission to view the cluster status (as the admin's cluster page)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.has_perm(DETAILS_PERMISSION))


# An operator action answers with the whole job or run only to a caller who may view it; to one
# who may only act, with its state (the schema says both).
JOB_REPLY = PolymorphicProxySerializer(
    component_name="JobReply",
    serializers=[JobSerializer, JobStateSerializer],
    resource_type_field_name=None,
)
RUN_REPLY = PolymorphicProxySerializer(
    component_name="RunReply",
    serializers=[RunSerializer, RunStateSerializer],
    resource_type_field_name=None,
)


def job_reply(request: Request, job: JobDefinition) -> Any:
    if request.user.has_perm(f"{APP}.view_jobdefinition"):
        return JobSerializer(job).data
    state = {"id": job.pk, "name": job.name, "enabled": job.enabled}
    return JobStateSerializer({**state, "deleted": job.deleted_at is not None}).data


def run_reply(request: Request, run: JobRun) -> Any:
    if request.user.has_perm(f"{APP}.view_jobrun"):
        return RunSerializer(run).data
    state = {"id": run.pk, "job": run.job_id, "status": run.status, "attempt": run.attempt}
    return RunStateSerializer(state).data


class BackfillResultSerializer(serializers.Serializer):  # type: ignore[type-arg]
    slots = serializers.IntegerField(help_text="Slots in the range without a run.")
    existing = serializers.IntegerField(help_text="Slots in the range that already have a run.")
    created = PolymorphicProxySerializer(
        component_name="RunReply",
        serializers=[RunSerializer, RunStateSerializer],
        resource_type_field_name=None,
        many=True,
        help_text="The runs recorded (empty for a dry run), whole or their state as for run/.",
    )


def backfill_reply(request: Request, slots: int, existing: int, created: list[JobRun]) -> Any:
    return {
        "slots": slots,
        "existing": existing,
        "created": [run_reply(request, run) for run in created],
    }
