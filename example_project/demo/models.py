"""The demo's own record of what executed: an independent witness, apart from the run ledger."""

from __future__ import annotations

from django.db import models


class Execution(models.Model):
    """One execution of a job's task body, written by the body itself (``demo.witness``)."""

    job_name = models.CharField(max_length=200)
    job_id = models.BigIntegerField()
    slot = models.DateTimeField()
    attempt = models.PositiveIntegerField()
    task_id = models.CharField(max_length=255)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)

    class Meta:
        indexes = [models.Index(fields=["job_id", "slot"], name="demo_execution_slot")]  # noqa: RUF012

    def __str__(self) -> str:
        return f"{self.job_name} {self.slot:%H:%M:%S} #{self.attempt} [{self.pid}]"
