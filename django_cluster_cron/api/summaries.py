"""A job's daily summaries in the API: what is left of its runs once they are pruned."""

from __future__ import annotations

from typing import ClassVar

from rest_framework import serializers

from ..models import RunSummary


class RunSummarySerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    runs = serializers.IntegerField(read_only=True, help_text="Every run of the day counted.")

    class Meta:
        model = RunSummary
        fields: ClassVar = [
            "day",
            "runs",
            "success",
            "failed",
            "skipped",
            "missed",
            "cancelled",
            "uncertain",
            "unfinished",
            "retries",
            "duration_p50",
            "duration_p95",
            "lateness_p95",
            "summed_at",
        ]
        read_only_fields = fields
