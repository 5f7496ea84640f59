"""The API's endpoints: jobs, runs and the cluster's status and health (the schedule preview is
in preview.py).

Operator actions call the same functions as the admin (:mod:`django_cluster_cron.actions`,
the model's pause/resume/soft delete/restore), so they leave the same rows in the ledger. Each
needs the Django permission the admin's action needs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, ClassVar, cast

from django.db import transaction
from django.db.models import OuterRef, Q, QuerySet, Subquery
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework import permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import actions, audit
from ..dbtime import DbNow
from ..models import JobChange, JobDefinition, JobRun, RunStatus, RunSummary
from ..ops.views import recent_health
from .params import JobPagination, flag, text
from .parsers import api_parser_classes
from .replies import (
    APP,
    JOB_REPLY,
    RUN_REPLY,
    BackfillResultSerializer,
    ClusterStatusPermission,
    backfill_reply,
    job_reply,
    run_reply,
)
from .schema import ClusterCronSchema
from .serializers import (
    BackfillSerializer,
    JobChangeSerializer,
    JobSerializer,
    PauseSerializer,
    RunNowSerializer,
)
from .strict import EmptyBody, printable_errors
from .summaries import RunSummarySerializer


class ModelPermissions(permissions.DjangoModelPermissions):
    """The model's view/add/change/delete permissions, reading included; the operator actions
    need the admin's own permissions for them (the view's ``action_permissions``)."""

    perms_map = {  # noqa: RUF012 - DRF reads it from the class
        **permissions.DjangoModelPermissions.perms_map,
        "GET": ["%(app_label)s.view_%(model_name)s"],
        "HEAD": ["%(app_label)s.view_%(model_name)s"],
    }

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        custom = getattr(view, "action_permissions", {}).get(view.action)
        if custom is not None:
            return bool(request.user.has_perm(f"{APP}.{custom}"))
        return super().has_permission(request, view)


def operation_error(exc: actions.ActionRefused) -> ValidationError:
    return ValidationError({"detail": str(exc)})


class ApiView(APIView):
    """What every view of the API shares: JSON read by the API's own parser (a body it cannot
    decode is a ``400``, never a ``500``), and error replies that can always be encoded."""

    def get_parsers(self) -> list[BaseParser]:
        return [parser() for parser in api_parser_classes()]

    def get_exception_handler(self) -> Any:
        return printable_errors(super().get_exception_handler())

    def refuse_any_body(self, request: Request, endpoint: str) -> None:
        """An action that takes no body refuses any field sent to it, by name."""
        body = EmptyBody(data=request.data, context={"body_of": endpoint})
        body.is_valid(raise_exception=True)


class Audited(ApiView):
    """Every change a request makes to a job is recorded as its user's, through "api": the
    request runs in one audit context (:func:`~django_cluster_cron.audit.acting_for`), which
    :meth:`dispatch` holds from start to end and :meth:`initial` names the user of, once the
    request is authenticated."""

    _audit_context: ExitStack

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        # Left however the request ends: one that fails with a server error never reaches
        # finalize_response, and its user must not stay the actor of this thread's next change.
        with ExitStack() as self._audit_context:
            return super().dispatch(request, *args, **kwargs)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # authenticates
        self._audit_context.enter_context(audit.acting_for(request, "api"))


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter("search", str, description="Part of the name or the task."),
            OpenApiParameter("enabled", bool, description="Only running (true) or paused jobs."),
            OpenApiParameter(
                "deleted", bool, description="Soft-deleted jobs (true) instead of live ones."
            ),
        ]
    )
)
class JobViewSet(Audited, viewsets.ModelViewSet):  # type: ignore[type-arg]
    """Jobs: list, create, read, update; DELETE soft-deletes (the ledger stays)."""

    serializer_class = JobSerializer
    permission_classes = (ModelPermissions,)
    schema = ClusterCronSchema()
    pagination_class = JobPagination
    queryset = JobDefinition.all_objects.all()
    lookup_value_regex = "[^/]+"
    # The admin's permission for each operator action (DELETE soft-deletes).
    action_permissions: ClassVar[dict[str, str]] = {
        "pause": "pause_jobdefinition",
        "resume": "pause_jobdefinition",
        "run": "run_jobdefinition",
        "backfill": "backfill_jobdefinition",
        "destroy": "softdelete_jobdefinition",
        "restore": "softdelete_jobdefinition",
    }

    # What changes a job: refused on a soft-deleted one, which is read-only until restored.
    changing_actions: ClassVar[frozenset[str]] = frozenset(
        {"update", "partial_update", "pause", "resume", "run", "backfill"}
    )

    def get_object(self) -> JobDefinition:
        job = cast(JobDefinition, super().get_object())
        if job.deleted_at is not None and self.action in self.changing_actions:
            raise ValidationError(
                {
                    "detail": "The job is deleted: it is read-only until it is restored "
                    f"(POST jobs/{job.pk}/restore/)."
                }
            )
        return job

    def perform_create(self, serializer: Any) -> None:
        """Save the job's fields, then pause or resume it as ``enabled`` says, through the very
        methods the pause/ and resume/ actions call; one transaction, one ``change_note``."""
        fields = serializer.validated_data
        note = fields.pop("change_note", "")
        enabled, pause_note = fields.pop("enabled", None), fields.pop("pause_note", None)
        change = state_change(serializer.instance, enabled, pause_note)
        if change is not None and not self.request.user.has_perm(f"{APP}.pause_jobdefinition"):
            raise PermissionDenied(
                "Pausing or resuming a job, or changing its pause note (enabled, pause_note), "
                "needs the permission pause_jobdefinition. Leave the fields out, or send them "
                "unchanged."
            )
        with transaction.atomic(), audit.acting(note=note or None):
            if serializer.instance is None or fields:
                serializer.save()
            if change is not None:
                change(serializer.instance)
        fresh(serializer.instance)

    perform_update = perform_create

    @extend_schema(responses=JobChangeSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=JobPagination)
    def history(self, request: Request, pk: str | None = None) -> Response:
        """The job's audit trail, newest first: who changed which fields from what to what."""
        job = self.get_object()
        page = self.paginate_queryset(JobChange.objects.filter(job=job))
        return self.get_paginated_response(JobChangeSerializer(page, many=True).data)

    @extend_schema(responses=RunSummarySerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=JobPagination)
    def summaries(self, request: Request, pk: str | None = None) -> Response:
        """The job's daily summaries, newest day first: its runs of each day (UTC), summed up
        before the first of them was pruned."""
        job = self.get_object()
        page = self.paginate_queryset(RunSummary.objects.filter(job=job).order_by("-day"))
        return self.get_paginated_response(RunSummarySerializer(page, many=True).data)

    def get_queryset(self) -> QuerySet[JobDefinition]:
        # The due time of a run recorded ahead, if any (the serializer's next_run): one
        # subquery for the whole page.
        ahead = JobRun.objects.filter(
            job=OuterRef("pk"), status=RunStatus.PENDING, due_at__gt=DbNow()
        ).order_by("due_at")
        jobs = JobDefinition.all_objects.annotate(
            ahead_due=Subquery(ahead.values("due_at")[:1])
        ).order_by("name", "id")
        params = self.request.query_params
        if self.action == "list":
            deleted = flag(params.get("deleted"), "deleted")
            jobs = jobs.filter(deleted_at__isnull=not deleted)
            enabled = flag(params.get("enabled"), "enabled", default=None)
            if enabled is not None:
                jobs = jobs.filter(enabled=enabled)
            search = text(params.get("search", ""), "search").strip()
            if search:
                jobs = jobs.filter(Q(name__icontains=search) | Q(task__icontains=search))
        return cast("QuerySet[JobDefinition]", jobs)

    def perform_destroy(self, instance: JobDefinition) -> None:
        self.refuse_any_body(self.request, "DELETE jobs/{id}/")
        if instance.deleted_at is None:
            instance.soft_delete()

    @extend_schema(request=PauseSerializer, responses=JOB_REPLY)
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        """Pause the job (with an optional note); its slots are not caught up on resume."""
        job = self.get_object()
        body = PauseSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job.pause(body.validated_data["note"])
        return Response(job_reply(request, fresh(job)))

    @extend_schema(request=None, responses=JOB_REPLY)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        """Resume from now on (no catch-up of what fell while paused)."""
        job = self.get_object()
        self.refuse_any_body(request, "resume/")
        job.resume()
        return Response(job_reply(request, fresh(job)))

    @extend_schema(request=RunNowSerializer, responses={201: RUN_REPLY})
    @action(detail=True, methods=["post"])
    def run(self, request: Request, pk: str | None = None) -> Response:
        """Record and publish a ``manual`` run for now, through the job's overlap policy or the
        one the body names (``overlap_policy``); no body is the job's."""
        job = self.get_object()
        body = RunNowSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        policy = body.validated_data.get("overlap_policy")
        try:
            run = actions.run_now(job, by=f"api:{request.user}", overlap_policy=policy)
        except actions.ActionRefused as exc:
            raise operation_error(exc) from None
        return Response(run_reply(request, run), status=status.HTTP_201_CREATED)

    @extend_schema(request=BackfillSerializer, responses=BackfillResultSerializer)
    @action(detail=True, methods=["post"])
    def backfill(self, request: Request, pk: str | None = None) -> Response:
        """Record ``backfill`` runs for the slots of a past range that have none (bounded),
        through ``overlap_policy`` (default ``buffer_all``: one at a time, in slot order)."""
        job = self.get_object()
        body = BackfillSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        start, end = body.validated_data["start"], body.validated_data["end"]
        policy = body.validated_data.get("overlap_policy")
        by = f"api:{request.user}"
        try:
            plan = actions.plan_backfill(job, start, end)
            actions.overlap_override(job, policy)
            created = (
                []
                if body.validated_data["dry_run"]
                else actions.backfill(job, start, end, by=by, overlap_policy=policy)
            )
        except actions.ActionRefused as exc:
            raise operation_error(exc) from None
        return Response(backfill_reply(request, len(plan.slots), plan.existing, created))

    @extend_schema(request=None, responses=JOB_REPLY)
    @action(detail=True, methods=["post"])
    def restore(self, request: Request, pk: str | None = None) -> Response:
        """Bring a soft-deleted job back (its name must be free among live jobs)."""
        job = self.get_object()
        self.refuse_any_body(request, "restore/")
        if job.deleted_at is None:
            raise ValidationError({"detail": "The job is not deleted."})
        from django.core.exceptions import ValidationError as DjangoValidationError

        try:
            job.restore()
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return Response(job_reply(request, job))


class HealthView(ApiView):
    """The cluster's health (the same report as ``manage.py cluster_health``); 503 if not. For
    users who may view the cluster status."""

    permission_classes = (ClusterStatusPermission,)
    schema = ClusterCronSchema()

    @extend_schema(
        parameters=[OpenApiParameter("broker", bool, description="Check the broker (default).")],
        responses={200: OpenApiTypes.OBJECT, 503: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        broker = flag(request.query_params.get("broker"), "broker", default=True)
        report = recent_health(broker=bool(broker))  # one round of checks per HEALTH_CACHE
        return Response(report.as_dict(), status=200 if report.healthy else 503)


def state_change(
    job: JobDefinition | None, enabled: bool | None, note: str | None
) -> Callable[[JobDefinition], None] | None:
    """What a request's ``enabled`` and ``pause_note`` do to ``job`` (None: a job the request
    creates): the model's pause() or resume() to call, as pause/ and resume/ call them, or None
    when they say nothing new.

    ``pause_note`` alone changes a paused job's note (as pause/ on a paused job does); the
    serializer has refused one for a job that stays running. A new job starts running.
    """
    running = True if job is None else job.enabled
    if enabled is False or (enabled is None and not running):
        if running:
            return lambda job: job.pause(note or "")
        if note is not None and job is not None and note != job.pause_note:
            return lambda job: job.pause(note)
    elif enabled and not running:
        return lambda job: job.resume()
    return None


def fresh(job: JobDefinition) -> JobDefinition:
    """Forget the listing's annotation of the run recorded ahead: a write may have withdrawn it,
    and the reply then asks the database (the serializer's next_run)."""
    job.__dict__.pop("ahead_due", None)
    return job
