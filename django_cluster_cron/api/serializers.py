"""What the API reads and writes. Validation is the model's: ``full_clean()`` errors, per field.

Every body is a :class:`~.strict.StrictBody`: a field that is not written is refused by name.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty

from ..ledger.piece_runs import progress_of
from ..models import (
    DEFINITION_FIELDS,
    JobChange,
    JobDefinition,
    JobRun,
    OverlapPolicy,
    RunStatus,
)
from ..redaction import ARGUMENT_FIELDS, redact, redact_changes, restore
from ..validation import MAX_JITTER
from .strict import JSONValueField, StrictBody

# Durations cross the API as seconds (a number), not Django's "HH:MM:SS" text.
JOB_FIELDS = (
    "id",
    "name",
    *DEFINITION_FIELDS,
    "enabled",
    "pause_note",
    "source",
    "code_origin",
    "scheduled_runs",
    "consecutive_failures",
    "finished",
    "next_run",
    "next_run_at",
    "last_scheduled_at",
    "created_at",
    "updated_at",
    "deleted_at",
    "change_note",
)
JOB_READ_ONLY = (
    "scheduled_runs",
    "consecutive_failures",
    "id",
    "source",
    "code_origin",
    "next_run_at",
    "last_scheduled_at",
    "created_at",
    "updated_at",
    "deleted_at",
)


@extend_schema_field({"type": "number", "format": "double", "minimum": 0, "exclusiveMinimum": True})
class SecondsField(serializers.Field):  # type: ignore[type-arg]
    """A ``timedelta`` as a number of seconds."""

    def to_representation(self, value: timedelta) -> float:
        return value.total_seconds()

    def to_internal_value(self, data: Any) -> timedelta:
        if isinstance(data, bool):
            raise serializers.ValidationError("Must be a number of seconds.")
        try:
            seconds = float(data)
        except (TypeError, ValueError):
            raise serializers.ValidationError("Must be a number of seconds.") from None
        if not 0 < seconds < 10**9:
            raise serializers.ValidationError("Must be a positive number of seconds.")
        return timedelta(seconds=seconds)


# Written by the view, not set on the model: the note of the change, and the job's state
# (``enabled``/``pause_note`` go through the model's pause() and resume(), as the actions do).
NOT_SET_ON_THE_MODEL = ("change_note", "enabled", "pause_note")


class StateField(serializers.BooleanField):
    """``enabled``: left out of a form means unchanged (DRF's BooleanField would say false)."""

    default_empty_html = empty


class ModelValidated(StrictBody, serializers.ModelSerializer):  # type: ignore[type-arg]
    """Runs the model's ``full_clean()`` so the API says exactly what the admin says."""

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        model: Any = self.Meta.model
        instance = self.instance or model()
        for name, value in attrs.items():
            if name not in NOT_SET_ON_THE_MODEL:
                setattr(instance, name, value)
        try:
            instance.full_clean()
        except DjangoValidationError as exc:
            raise serializers.ValidationError(serializers.as_serializer_error(exc)) from None
        return attrs


class JobSerializer(ModelValidated):
    body_of = "a job"

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        job = self.instance
        enabled = attrs.get("enabled", True if job is None else job.enabled)
        if enabled and attrs.get("pause_note"):
            raise serializers.ValidationError(
                {
                    "pause_note": [
                        'A running job has no pause note: send it with "enabled": false '
                        "(or POST it to pause/ as the note)."
                    ]
                }
            )
        if job is not None and job.source == "code":
            changed = {
                name: [job.code_owned]
                for name, value in attrs.items()
                if (name in DEFINITION_FIELDS or name == "name") and getattr(job, name) != value
            }
            if changed:
                raise serializers.ValidationError(changed)
        return super().validate(attrs)

    enabled = StateField(
        required=False,
        help_text="false pauses the job and true resumes it, as pause/ and resume/ do "
        "(left out: unchanged). A job declared in code may be paused and resumed too.",
    )
    pause_note = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=255,
        help_text='Why the job is paused: set with "enabled": false, or on a paused job; '
        '"" on a running one.',
    )
    catchup_window = SecondsField(
        required=False, help_text="How far back missed slots are caught up, in seconds."
    )
    finished = serializers.SerializerMethodField(
        help_text='Why the job will not run again on its schedule ("finished: ..."), or "".'
    )
    change_note = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=500,
        help_text="Why you make this change: kept in the job's history with your name.",
    )

    next_run = serializers.SerializerMethodField(
        help_text="When the job runs next: its run recorded ahead of its time if there is one "
        "(next_run_at is then the instant after it), else next_run_at."
    )

    def get_finished(self, job: JobDefinition) -> str:
        return job.finished_reason(timezone.now())

    @extend_schema_field(
        {"type": "string", "format": "date-time", "nullable": True, "readOnly": True}
    )
    def get_next_run(self, job: JobDefinition) -> str | None:
        # The list and detail views annotate it (one subquery); a just-saved job asks.
        ahead = job.ahead_due if hasattr(job, "ahead_due") else _ahead_due(job)
        value = ahead or job.next_run_at
        return None if value is None else serializers.DateTimeField().to_representation(value)

    args = JSONValueField(
        required=False,
        help_text="JSON list of positional arguments (values of secret-looking keys masked).",
    )
    kwargs = JSONValueField(
        required=False,
        help_text="JSON object of keyword arguments (values of secret-looking keys masked: "
        "send a mask back unchanged to keep the stored value).",
    )

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)
        for name in ARGUMENT_FIELDS:
            if name in data:
                data[name] = redact(data[name])
        return data

    def validate_args(self, value: Any) -> Any:
        return self._arguments("args", value)

    def validate_kwargs(self, value: Any) -> Any:
        return self._arguments("kwargs", value)

    def _arguments(self, name: str, value: Any) -> Any:
        job = self.instance
        if job is None:
            return value
        stored = getattr(job, name)
        if job.source == "code":
            # Only what a GET gave (masked) is taken back: a request can neither change the
            # arguments of a job declared in code nor confirm a guess at a masked value.
            if value != redact(stored):
                raise serializers.ValidationError(job.code_owned)
            return stored
        return restore(value, stored)

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        for field in fields.values():
            if isinstance(field, serializers.ChoiceField):
                field.error_messages["invalid_choice"] = (
                    '"{input}" is not one of: ' + ", ".join(map(str, field.choices)) + "."
                )
        return fields

    class Meta:
        model = JobDefinition
        fields = JOB_FIELDS
        read_only_fields = JOB_READ_ONLY
        # The live-name uniqueness is the model's clean() (a per-field "name" error).
        validators: ClassVar[list[Any]] = []


def _ahead_due(job: JobDefinition) -> Any:
    return (
        JobRun.objects.filter(job_id=job.pk, status=RunStatus.PENDING, due_at__gt=timezone.now())
        .order_by("due_at")
        .values_list("due_at", flat=True)
        .first()
    )


class RunSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    job_name = serializers.CharField(source="job.name", read_only=True)
    duration = serializers.SerializerMethodField(help_text="Seconds the body ran.")
    progress = serializers.SerializerMethodField(
        help_text="A run split into pieces: its pieces so far, e.g. '37/64 done, 2 failed' "
        "(empty for a run without pieces)."
    )

    class Meta:
        model = JobRun
        fields = (
            "id",
            "job",
            "job_name",
            "scheduled_for",
            "due_at",
            "status",
            "trigger",
            "task_id",
            "attempt",
            "dispatched_by",
            "epoch",
            "queued_at",
            "started_at",
            "finished_at",
            "duration",
            "heartbeat_at",
            "retry_at",
            "worker",
            "worker_pool",
            "backend_result_id",
            "cancel_requested_at",
            "cancel_requested_by",
            "piece_count",
            "progress",
            "reason",
            "result",
            "error",
            "traceback",
            "created_at",
        )
        read_only_fields = fields

    def get_duration(self, run: JobRun) -> float | None:
        return None if run.duration is None else run.duration.total_seconds()

    def get_progress(self, run: JobRun) -> str:
        return progress_of(run)


class PauseSerializer(StrictBody):
    body_of = "pause/"
    note = serializers.CharField(required=False, allow_blank=True, max_length=255, default="")


OVERLAP_OVERRIDE = (
    "The overlap policy these runs go through instead of the job's own (allow, skip, "
    "buffer_one, buffer_all, cancel_other, terminate_other)."
)


def overlap_override(help_text: str) -> serializers.ChoiceField:
    return serializers.ChoiceField(
        choices=OverlapPolicy.choices, required=False, allow_null=True, help_text=help_text
    )


class RunNowSerializer(StrictBody):
    body_of = "run/"
    overlap_policy = overlap_override(f"{OVERLAP_OVERRIDE} Default: the job's.")


class BackfillSerializer(StrictBody):
    body_of = "backfill/"
    start = serializers.DateTimeField(help_text="Slots after this instant...")
    end = serializers.DateTimeField(help_text="...up to and including this one (in the past).")
    dry_run = serializers.BooleanField(
        default=False, help_text="Only say how many slots the range holds."
    )
    overlap_policy = overlap_override(
        f"{OVERLAP_OVERRIDE} Default: buffer_all (one at a time, in slot order)."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": "The end must be after the start."})
        return attrs


class PreviewQuerySerializer(serializers.Serializer):  # type: ignore[type-arg]
    """What to preview: a saved job (``job``) and any of its fields replaced, or a schedule
    given field by field (``cron`` at least)."""

    cron = serializers.CharField(
        max_length=200, required=False, help_text="The schedule (required without job)."
    )
    timezone = serializers.CharField(
        max_length=64, required=False, help_text="Default: the job's, else UTC."
    )
    count = serializers.IntegerField(min_value=1, max_value=100, default=10)
    start_at = serializers.DateTimeField(required=False, help_text="No slot before this.")
    end_at = serializers.DateTimeField(required=False, help_text="No slot after this.")
    jitter = serializers.IntegerField(
        min_value=0,
        max_value=MAX_JITTER,
        required=False,
        help_text="The job's jitter, seconds (default: the job's, else 0).",
    )
    job = serializers.IntegerField(
        min_value=0,
        required=False,
        help_text="A saved job's id: its schedule, zone, exclusions, active period and jitter "
        "are previewed, each replaced by the parameter of that name if given (needs "
        "view_jobdefinition).",
    )
    exclusions = serializers.ListField(
        child=serializers.CharField(max_length=100),
        required=False,
        max_length=200,
        help_text="Dates the schedule does not fire on (repeat the parameter for each rule): "
        "'2026-12-24', '2026-12-27..2026-12-31', 'holidays:DE-BY'.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        start, end = attrs.get("start_at"), attrs.get("end_at")
        if start and end and end <= start:
            raise serializers.ValidationError({"end_at": "The end must be after the start."})
        return attrs


class PreviewSerializer(serializers.Serializer):  # type: ignore[type-arg]
    cron = serializers.CharField()
    timezone = serializers.CharField()
    description = serializers.CharField(help_text="The schedule in words.")
    fire_times = serializers.ListField(
        child=serializers.DateTimeField(),
        help_text="When the next runs are dispatched (each slot plus its jitter offset).",
    )
    excluded = serializers.ListField(
        child=serializers.CharField(),
        help_text="Each date the exclusions leave out (no run that day), and why: every one up "
        "to the last of those runs, and at least the next three however far ahead.",
    )
    excluded_at = serializers.ListField(
        child=serializers.DateTimeField(),
        help_text="For each of those dates, in the same order, the first slot it leaves out.",
    )
    slots = serializers.ListField(
        child=serializers.DateTimeField(),
        help_text="The slots of those runs (their identity), in the same order.",
    )


class JobChangeSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = JobChange
        fields = ("id", "at", "actor", "via", "action", "changes", "note")
        read_only_fields = fields

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)
        data["changes"] = redact_changes(data["changes"] or {})
        return data


class JobStateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """What an operator action on a job answers a caller who may not view jobs: its state, none
    of its definition (its arguments may hold what that caller must not read)."""

    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(read_only=True)
    enabled = serializers.BooleanField(read_only=True)
    deleted = serializers.BooleanField(read_only=True)


class RunStateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """What an operator action on a run answers a caller who may not view runs: its state, not
    its result, error or traceback."""

    id = serializers.IntegerField(read_only=True)
    job = serializers.IntegerField(read_only=True)
    status = serializers.CharField(read_only=True)
    attempt = serializers.IntegerField(read_only=True)
