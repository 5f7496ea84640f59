"""The independent witness: task bodies record what actually executed, apart from JobRun."""

from __future__ import annotations

from django.db import models


class Execution(models.Model):
    label = models.CharField(max_length=200, db_index=True)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"{self.label} [{self.pid}] {self.started_at:%H:%M:%S.%f}"
