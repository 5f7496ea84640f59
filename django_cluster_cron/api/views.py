"""The API's endpoints: jobs, runs, a schedule preview and the cluster's status and health.

Operator actions call the same functions as the admin (:mod:`django_cluster_cron.actions`,
the model's pause/resume/soft delete/restore), so they leave the same rows in the ledger. Each
needs the Django permission the admin's action needs.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, cast

from django.db.models import OuterRef, Q, QuerySet, Subquery
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination, LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import actions, audit
from ..core.cron import CronSchedule
from ..core.timing import SlotTiming
from ..dbtime import DbNow
from ..describe import describe
from ..models import JobChange, JobDefinition, JobRun, RunStatus, RunTrigger
from ..ops.health import cluster_health
from .schema import ClusterCronSchema
from .serializers import (
    BackfillResultSerializer,
    BackfillSerializer,
    JobChangeSerializer,
    JobSerializer,
    PauseSerializer,
    PreviewQuerySerializer,
    PreviewSerializer,
    RunSerializer,
)

APP = "django_cluster_cron"


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


def _operation_error(exc: actions.ActionRefused) -> ValidationError:
    return ValidationError({"detail": str(exc)})


def _page_number(request: Request, name: str, default: int | None, cap: int | None) -> int | None:
    """A paging parameter, refused when it is not a whole number >= 0 (DRF would ignore it)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: [f"'{raw}' is not a whole number."]}) from None
    if value < 0 or (name == "limit" and value == 0):
        raise ValidationError({name: [f"{value} is out of range."]})
    return min(value, cap) if cap is not None else value


class JobPagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 500

    def get_limit(self, request: Request) -> int | None:
        return _page_number(request, self.limit_query_param, self.default_limit, self.max_limit)

    def get_offset(self, request: Request) -> int:
        return _page_number(request, self.offset_query_param, 0, None) or 0


class Audited(APIView):
    """Every change a request makes to a job is recorded as its user's, through "api"."""

    _acting: Any = None

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # authenticates
        self._acting = audit.acting_for(request, "api")
        self._acting.__enter__()

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        # Left in ``finally``: a request that fails with a server error never reaches
        # finalize_response, and its user must not stay the actor of this thread's next change.
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            if self._acting is not None:
                self._acting.__exit__(None, None, None)
                self._acting = None


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

    def perform_create(self, serializer: Any) -> None:
        note = serializer.validated_data.pop("change_note", "")
        with audit.acting(note=note or None):
            serializer.save()

    perform_update = perform_create

    @extend_schema(responses=JobChangeSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=JobPagination)
    def history(self, request: Request, pk: str | None = None) -> Response:
        """The job's audit trail, newest first: who changed which fields from what to what."""
        job = self.get_object()
        page = self.paginate_queryset(JobChange.objects.filter(job=job))
        return self.get_paginated_response(JobChangeSerializer(page, many=True).data)

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
            deleted = _flag(params.get("deleted"), "deleted")
            jobs = jobs.filter(deleted_at__isnull=not deleted)
            enabled = _flag(params.get("enabled"), "enabled", default=None)
            if enabled is not None:
                jobs = jobs.filter(enabled=enabled)
            search = _text(params.get("search", ""), "search").strip()
            if search:
                jobs = jobs.filter(Q(name__icontains=search) | Q(task__icontains=search))
        return cast("QuerySet[JobDefinition]", jobs)

    def perform_destroy(self, instance: JobDefinition) -> None:
        if instance.deleted_at is None:
            instance.soft_delete()

    @extend_schema(request=PauseSerializer, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        """Pause the job (with an optional note); its slots are not caught up on resume."""
        job = self.get_object()
        body = PauseSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job.pause(body.validated_data["note"])
        return Response(JobSerializer(job).data)

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        """Resume from now on (no catch-up of what fell while paused)."""
        job = self.get_object()
        job.resume()
        return Response(JobSerializer(job).data)

    @extend_schema(request=None, responses={201: RunSerializer})
    @action(detail=True, methods=["post"])
    def run(self, request: Request, pk: str | None = None) -> Response:
        """Record and publish a ``manual`` run for now, through the overlap policy."""
        job = self._live_job()
        try:
            run = actions.run_now(job, by=f"api:{request.user}")
        except actions.ActionRefused as exc:
            raise _operation_error(exc) from None
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=BackfillSerializer, responses=BackfillResultSerializer)
    @action(detail=True, methods=["post"])
    def backfill(self, request: Request, pk: str | None = None) -> Response:
        """Record ``backfill`` runs for the slots of a past range that have none (bounded)."""
        job = self._live_job()
        body = BackfillSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        start, end = body.validated_data["start"], body.validated_data["end"]
        try:
            plan = actions.plan_backfill(job, start, end)
            created = (
                []
                if body.validated_data["dry_run"]
                else actions.backfill(job, start, end, by=f"api:{request.user}")
            )
        except actions.ActionRefused as exc:
            raise _operation_error(exc) from None
        return Response(
            BackfillResultSerializer(
                {"slots": len(plan.slots), "existing": plan.existing, "created": created}
            ).data
        )

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def restore(self, request: Request, pk: str | None = None) -> Response:
        """Bring a soft-deleted job back (its name must be free among live jobs)."""
        job = self.get_object()
        if job.deleted_at is None:
            raise ValidationError({"detail": "The job is not deleted."})
        from django.core.exceptions import ValidationError as DjangoValidationError

        try:
            job.restore()
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return Response(JobSerializer(job).data)

    def _live_job(self) -> JobDefinition:
        job = cast(JobDefinition, self.get_object())
        if job.deleted_at is not None:
            raise ValidationError({"detail": "The job is deleted; restore it first."})
        return job


class RunPagination(CursorPagination):
    """Cursor pagination: stable and cheap however large the ledger grows."""

    ordering = ("-scheduled_for", "-id")
    page_size = 50
    max_page_size = 500
    page_size_query_param = "limit"

    def get_page_size(self, request: Request) -> int | None:
        return _page_number(request, "limit", self.page_size, self.max_page_size)


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter("job", int, description="Runs of this job id."),
            OpenApiParameter("status", str, description="One status, e.g. failed."),
            OpenApiParameter("trigger", str, description="schedule, catchup, manual, backfill."),
            OpenApiParameter(
                "after", OpenApiTypes.DATETIME, description="Slots at or after this instant."
            ),
            OpenApiParameter(
                "before", OpenApiTypes.DATETIME, description="Slots before this instant."
            ),
        ]
    )
)
class RunViewSet(
    Audited,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,  # type: ignore[type-arg]
):
    """The run ledger: list (newest slot first, cursor pages), read, retry, cancel."""

    serializer_class = RunSerializer
    permission_classes = (ModelPermissions,)
    schema = ClusterCronSchema()
    pagination_class = RunPagination
    queryset = JobRun.objects.all()
    lookup_value_regex = "[^/]+"
    action_permissions: ClassVar[dict[str, str]] = {
        "retry": "retry_jobrun",
        "cancel": "cancel_jobrun",
    }

    def get_queryset(self) -> QuerySet[JobRun]:
        runs = JobRun.objects.select_related("job")
        params = self.request.query_params
        if self.action != "list":
            return cast("QuerySet[JobRun]", runs)
        if "job" in params:
            runs = runs.filter(job_id=_integer(params["job"], "job"))
        for name, choices in (("status", RunStatus.values), ("trigger", RunTrigger.values)):
            if params.get(name):
                runs = runs.filter(**{name: _choice(params[name], name, choices)})
        if "after" in params:
            runs = runs.filter(scheduled_for__gte=_instant(params["after"], "after"))
        if "before" in params:
            runs = runs.filter(scheduled_for__lt=_instant(params["before"], "before"))
        return cast("QuerySet[JobRun]", runs)

    @extend_schema(request=None, responses=RunSerializer)
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        """Run a failed run again: the same run, its next attempt."""
        try:
            run = actions.retry(self.get_object())
        except actions.ActionRefused as exc:
            raise _operation_error(exc) from None
        return Response(RunSerializer(run).data)

    @extend_schema(request=None, responses=RunSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel a run that has not started (pending, queued or waiting for a retry)."""
        try:
            run = actions.cancel(self.get_object(), reason=f"cancelled by {request.user}")
        except actions.ActionRefused as exc:
            raise _operation_error(exc) from None
        return Response(RunSerializer(run).data)


class PreviewView(APIView):
    """The next fire times of an expression in a zone, without saving anything."""

    permission_classes = (permissions.IsAuthenticated,)
    schema = ClusterCronSchema()

    @extend_schema(parameters=[PreviewQuerySerializer], responses=PreviewSerializer)
    def get(self, request: Request) -> Response:
        query = PreviewQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        cron, zone = data["cron"], data["timezone"]
        jitter = data["jitter"]
        timing = SlotTiming(
            data.get("start_at"),
            data.get("end_at"),
            timedelta(seconds=jitter),
            data.get("job", 0) if jitter else 0,
        )
        try:
            upcoming = timing.upcoming(
                CronSchedule.parse(cron, zone), datetime.now(timezone.utc), data["count"]
            )
            words = describe(cron)
        except ValueError as exc:  # ScheduleError names the input that is wrong
            field = "timezone" if getattr(exc, "field", None) == "timezone" else "cron"
            raise ValidationError({field: [str(exc)]}) from None
        return Response(
            PreviewSerializer(
                {
                    "cron": cron,
                    "timezone": zone,
                    "description": words,
                    "fire_times": [due for _, due in upcoming],
                    "slots": [slot for slot, _ in upcoming],
                }
            ).data
        )


class HealthView(APIView):
    """The cluster's health (the same report as ``manage.py cluster_health``); 503 if not."""

    permission_classes = (permissions.IsAuthenticated,)
    schema = ClusterCronSchema()

    @extend_schema(
        parameters=[OpenApiParameter("broker", bool, description="Check the broker (default).")],
        responses={200: OpenApiTypes.OBJECT, 503: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        broker = _flag(request.query_params.get("broker"), "broker", default=True)
        report = cluster_health(broker=bool(broker))
        return Response(report.as_dict(), status=200 if report.healthy else 503)


def _flag(value: str | None, name: str, default: bool | None = False) -> bool | None:
    if value is None:
        return default
    lowered = value.lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise ValidationError({name: [f"'{value}' is not a boolean: use true or false."]})


def _text(value: str, name: str) -> str:
    if "\x00" in value:  # no database column can hold it; PostgreSQL refuses it outright
        raise ValidationError({name: ["must not contain a NUL (\\x00) character."]})
    return value


def _choice(value: str, name: str, choices: list[str]) -> str:
    if value not in choices:
        raise ValidationError(
            {name: [f"{_text(value, name)!r} is not one of: {', '.join(choices)}."]}
        )
    return value


def _integer(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValidationError({name: [f"'{value}' is not a whole number."]}) from None


# RFC 3339 date-time, as the schema's "date-time" format says: seconds and an offset required.
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def _instant(value: str, name: str) -> datetime:
    from django.utils.dateparse import parse_datetime

    parsed = None
    if RFC3339.fullmatch(value):
        try:
            # In UTC: databases refuse some offsets Python accepts (PostgreSQL: beyond 15:59).
            parsed = parse_datetime(value)
            parsed = parsed.astimezone(timezone.utc) if parsed is not None else None
        except (ValueError, OverflowError):
            parsed = None
    if parsed is None:
        raise ValidationError(
            {name: [f"'{value}' is not an RFC 3339 date and time, e.g. 2026-11-24T09:00:00Z."]}
        )
    return parsed
