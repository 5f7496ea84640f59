"""The tables the scheduler nodes coordinate through: the leases with their fencing epoch, node
reports and counters (the last two with the database backend only), and the proxy that puts the
cluster page in the admin."""

from __future__ import annotations

from typing import ClassVar

from django.db import models


class SchedulerLease(models.Model):
    """A named lease and its fencing epoch: ``leader`` (the scheduler's leadership), and with the
    database lease backend also ``lock:<name>`` (cluster locks).

    The ``leader`` row decides whose writes *count*. Taking leadership increments ``epoch``
    (with the Redis backend the scheduler does it after taking the Redis lease; with the
    database backend the acquiring UPDATE does it, see :mod:`django_cluster_cron.leases.database`)
    and writes the new holder's ``token``. Every leader transaction starts with a conditional
    ``UPDATE … WHERE epoch = <mine> AND token = <mine>`` on this row (the fence,
    :mod:`django_cluster_cron.ledger.fence`): it fails once a newer leader has taken over, and
    while it holds the row lock a newer leader's bump waits for it to commit. So a paused leader
    that wakes up after its lease expired cannot record, advance or publish anything under its
    old epoch.

    ``valid_until`` and ``ttl`` are used by the database lease backend only (database time).
    ``handed_over_at`` by the Redis lease only: a leader that lost its link to Redis but not to
    the database gives its term up here, so a standby frees the Redis key at once instead of
    waiting for it to expire (see :mod:`django_cluster_cron.scheduler.leadership`).
    """

    name = models.CharField(max_length=255, unique=True)
    epoch = models.BigIntegerField(default=0)
    holder = models.CharField(max_length=255, blank=True, help_text="Node id of the holder.")
    token = models.CharField(max_length=255, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    last_write_at = models.DateTimeField(null=True, blank=True)
    # How many fenced writes the row has seen (the leader row): only grows on one server, so a
    # node that finds it lower than it saw knows the database lost writes.
    writes = models.PositiveBigIntegerField(default=0, db_default=0)  # an earlier release inserts
    valid_until = models.DateTimeField(
        null=True, blank=True, help_text="Database lease: held until (database time)."
    )
    ttl = models.DurationField(
        null=True, blank=True, help_text="Database lease: the time-to-live its holder asked for."
    )
    handed_over_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Redis lease: when its holder, unable to reach Redis, gave its term up.",
    )

    class Meta:
        verbose_name = "scheduler lease"

    def __str__(self) -> str:
        return f"{self.name}: epoch {self.epoch} held by {self.holder or 'nobody'}"


class NodeReport(models.Model):
    """A scheduler node's latest status, for the cluster page (database lease backend).

    Each node updates its own row about every few seconds; rows expire a few TTLs after the node
    stops reporting and are pruned an hour later.
    """

    node = models.CharField(max_length=255, unique=True)
    payload = models.JSONField(default=dict)
    seen_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "scheduler node report"

    def __str__(self) -> str:
        return self.node


class ClusterCounter(models.Model):
    """A cluster-wide counter (database lease backend), e.g. duplicate deliveries dropped."""

    name = models.CharField(max_length=100, unique=True)
    value = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} = {self.value}"


class ClusterStatus(SchedulerLease):
    """Proxy that puts the cluster status page in the admin index (no table of its own)."""

    class Meta:
        proxy = True
        verbose_name = "cluster status"
        verbose_name_plural = "cluster status"
        permissions: ClassVar = [("forcerelease_lock", "Can force-release cluster locks")]
