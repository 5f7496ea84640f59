"""The API's schedule preview: the next runs of a schedule, or of a saved job, and the dates its
exclusions leave out; nothing is saved."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import permissions
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ..core.timing import SlotTiming
from ..describe import preview
from ..models import JobDefinition
from .replies import APP
from .schema import ClusterCronSchema
from .serializers import PreviewQuerySerializer, PreviewSerializer
from .views import ApiView


class PreviewView(ApiView):
    """The next fire times of a schedule, or of a saved job, without saving anything."""

    permission_classes = (permissions.IsAuthenticated,)
    schema = ClusterCronSchema()

    @extend_schema(parameters=[PreviewQuerySerializer], responses=PreviewSerializer)
    def get(self, request: Request) -> Response:
        query = PreviewQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = {**self._saved(request, query.validated_data.get("job")), **query.validated_data}
        if "cron" not in data:
            raise ValidationError(
                {"cron": ["This field is required (or give job=, a saved job's id)."]}
            )
        cron, zone = data["cron"], data.get("timezone", "UTC")
        start, end, jitter = data.get("start_at"), data.get("end_at"), data.get("jitter", 0)
        if start and end and end <= start:
            raise ValidationError({"end_at": ["The end must be after the start."]})
        timing = SlotTiming(
            start, end, timedelta(seconds=jitter), data.get("job", 0) if jitter else 0
        )
        now = datetime.now(timezone.utc)
        exclusions = data.get("exclusions") or None
        try:
            found = preview(cron, zone, now, data["count"], timing, exclusions)
        except ValueError as exc:  # ScheduleError names the input that is wrong
            field = getattr(exc, "field", None)
            raise ValidationError(
                {field if field in ("timezone", "exclusions") else "cron": [str(exc)]}
            ) from None
        return Response(
            PreviewSerializer(
                {
                    "cron": cron,
                    "timezone": zone,
                    "description": found.words,
                    "fire_times": [due for _, due in found.upcoming],
                    "excluded": [why for _, why in found.excluded],
                    "excluded_at": [fire for fire, _ in found.excluded],
                    "slots": [slot for slot, _ in found.upcoming],
                }
            ).data
        )

    def _saved(self, request: Request, pk: int | None) -> dict[str, Any]:
        """The preview's fields as the saved job ``pk`` holds them ({} without one)."""
        if pk is None:
            return {}
        if not request.user.has_perm(f"{APP}.view_jobdefinition"):
            raise PermissionDenied(
                "Previewing a saved job (job=) needs the permission view_jobdefinition; "
                "without it, give the schedule itself (cron=, timezone=, ...)."
            )
        job = JobDefinition.all_objects.filter(pk=pk).first()
        if job is None:
            raise ValidationError({"job": [f"There is no job {pk}."]})
        saved = {
            "cron": job.cron,
            "timezone": job.timezone,
            "exclusions": job.exclusions,
            "jitter": job.jitter,
        }
        return {
            **saved,
            **{name: getattr(job, name) for name in ("start_at", "end_at") if getattr(job, name)},
        }
