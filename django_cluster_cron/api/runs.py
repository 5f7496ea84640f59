"""The API's run ledger: list, read, retry and cancel runs (``runs/``).

Operator actions call the same functions as the admin (:mod:`django_cluster_cron.actions`), so
they leave the same rows in the ledger; each needs the admin action's Django permission.
"""

from __future__ import annotations

from typing import ClassVar, cast

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from .. import actions
from ..ledger.piece_runs import progress_of
from ..models import MAX_PIECES, JobPiece, JobRun, RunStatus, RunTrigger
from .params import RunPagination, choice, instant, integer
from .replies import RUN_REPLY, run_reply
from .schema import ClusterCronSchema
from .serializers import RunSerializer
from .strict import StrictBody
from .views import Audited, ModelPermissions, operation_error


class PieceSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    duration = serializers.SerializerMethodField(help_text="Seconds its body ran.")

    class Meta:
        model = JobPiece
        fields = (
            "index",
            "key",
            "status",
            "task_id",
            "attempt",
            "queued_at",
            "started_at",
            "finished_at",
            "duration",
            "heartbeat_at",
            "retry_at",
            "publish_count",
            "worker",
            "result",
            "error",
        )
        read_only_fields = fields

    def get_duration(self, piece: JobPiece) -> float | None:
        return None if piece.duration is None else piece.duration.total_seconds()


class RunPiecesSerializer(serializers.Serializer):  # type: ignore[type-arg]
    run = serializers.IntegerField(help_text="The run's id.")
    piece_count = serializers.IntegerField(help_text="How many pieces it was split into.")
    progress = serializers.CharField(help_text="Its pieces so far, e.g. '37/64 done, 2 failed'.")
    pieces = PieceSerializer(many=True)


class RetryPiecesSerializer(StrictBody):
    body_of = "retry-pieces/"
    indexes = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=MAX_PIECES - 1),
        required=False,
        allow_empty=False,
        max_length=MAX_PIECES,
        help_text="The failed pieces to send again, by index (default: every failed piece).",
    )


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
    """The run ledger: list (newest slot first, cursor pages), read, retry, cancel; a run's
    pieces, and a retry of its failed ones."""

    serializer_class = RunSerializer
    permission_classes = (ModelPermissions,)
    schema = ClusterCronSchema()
    pagination_class = RunPagination
    queryset = JobRun.objects.all()
    lookup_value_regex = "[^/]+"
    action_permissions: ClassVar[dict[str, str]] = {
        "retry": "retry_jobrun",
        "retry_pieces": "retry_jobrun",
        "cancel": "cancel_jobrun",
    }

    def get_queryset(self) -> QuerySet[JobRun]:
        params = self.request.query_params
        if self.action != "list":
            return cast("QuerySet[JobRun]", JobRun.objects.select_related("job"))
        # A page's jobs in a second query, not a join: MySQL/MariaDB planned the join from the
        # jobs' side and sorted the whole ledger.
        runs = JobRun.objects.prefetch_related("job")
        if "job" in params:
            runs = runs.filter(job_id=integer(params["job"], "job"))
        for name, choices in (("status", RunStatus.values), ("trigger", RunTrigger.values)):
            if params.get(name):
                runs = runs.filter(**{name: choice(params[name], name, choices)})
        if "after" in params:
            runs = runs.filter(scheduled_for__gte=instant(params["after"], "after"))
        if "before" in params:
            runs = runs.filter(scheduled_for__lt=instant(params["before"], "before"))
        return cast("QuerySet[JobRun]", runs)

    @extend_schema(request=None, responses=RUN_REPLY)
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        """Run a failed run again: the same run, its next attempt."""
        run = self.get_object()
        self.refuse_any_body(request, "retry/")
        try:
            run = actions.retry(run)
        except actions.ActionRefused as exc:
            raise operation_error(exc) from None
        return Response(run_reply(request, run))

    @extend_schema(request=None, responses=RUN_REPLY)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel a run. One that has not started (pending, queued or waiting for a retry) is
        cancelled at once; one that runs is asked to stop (``cancel_requested_at``): its body
        sees it at its next heartbeat, it is recorded ``cancelled`` when it ends, and, where its
        job sets ``cancel_grace`` and its worker's pool can (``worker_pool``: prefork, eventlet,
        gevent), it is terminated if it goes on past that grace. 400 for a run that has ended,
        or whose cancel was already asked for."""
        run = self.get_object()
        self.refuse_any_body(request, "cancel/")
        by = str(request.user)
        try:
            run = actions.cancel(run, reason=f"cancelled by {by}", by=by)
        except actions.ActionRefused as exc:
            raise operation_error(exc) from None
        return Response(run_reply(request, run))

    @extend_schema(responses=RunPiecesSerializer)
    @action(detail=True, methods=["get"])
    def pieces(self, request: Request, pk: str | None = None) -> Response:
        """The pieces of a run split into pieces, by index (the completion message, index -1,
        first; at most 10,001), with the run's progress."""
        run = self.get_object()
        found = JobPiece.objects.filter(run=run).order_by("index")
        reply = {"run": run.pk, "piece_count": run.piece_count, "progress": progress_of(run)}
        return Response(RunPiecesSerializer({**reply, "pieces": found}).data)

    @extend_schema(request=RetryPiecesSerializer, responses=RUN_REPLY)
    @action(detail=True, methods=["post"], url_path="retry-pieces")
    def retry_pieces(self, request: Request, pk: str | None = None) -> Response:
        """Send failed pieces of a run again (``indexes``; all of them when left out), each as
        its next attempt; a failed run is re-opened (``running``), with the pieces its failure
        cancelled, and closes again when they have ended. 400 for a run without pieces or
        without such failed pieces."""
        run = self.get_object()
        body = RetryPiecesSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            run = actions.retry_pieces(run, body.validated_data.get("indexes"))
        except actions.ActionRefused as exc:
            raise operation_error(exc) from None
        return Response(run_reply(request, run))
