"""A term handed over through the database, when the lease's backend is out of reach.

A leader that cannot reach its lease's backend to renew or release it (the Redis lease) gives its
term up in the database instead (:meth:`Fence.hand_over
<django_cluster_cron.ledger.fence.Fence.hand_over>`); a standby that finds such a term frees the
lease (only while that leader's token holds it) and takes it at once, rather than waiting for its
TTL. The database lease needs neither: it lives in the database, and a standby sees a leader whose
connection ended through the lease's session witness (:mod:`django_cluster_cron.leases.witness`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.db import DatabaseError

from ..leases import Lease, LeaseBackend
from ..leases.base import node_of
from ..ledger.fence import Fence

logger = logging.getLogger("django_cluster_cron.scheduler")


class Handover:
    """Giving a term up through the database, and taking the lease of a term given up so."""

    def __init__(
        self,
        *,
        node_id: str,
        lease: Lease,
        backend: LeaseBackend,
        dependency: str,
        on_database_error: Callable[[], object],
        seen: Callable[[int, int, datetime | None], object],
    ) -> None:
        self.node_id = node_id
        self.lease = lease
        self.backend = backend
        # What the lease's outage is logged as (``redis``).
        self.dependency = dependency
        self._on_database_error = on_database_error
        # Where the leader row a standby reads here goes (the term's watch of the row).
        self._seen = seen

    def give_up(self, fence: Fence) -> None:
        """The lease's backend is out of reach, the database maybe not: give the term up there,
        so a standby frees the lease now rather than when its TTL runs out (Redis lease; the
        database lease lives in the database, which a standby's session witness covers)."""
        if self.backend.fences_in_lease:
            return
        try:
            handed = fence.hand_over()
        except DatabaseError:
            self._on_database_error()
            return
        if handed:
            logger.warning(
                "lease.handed_over node=%s epoch=%s: %s unreachable, the term is given up through "
                "the database",
                self.node_id,
                fence.epoch,
                self.dependency,
            )

    def take(self) -> bool:
        """Free and take the lease of a leader that gave its term up in the database (see
        :meth:`give_up`); False if there is none, or another node was first."""
        if self.backend.fences_in_lease:
            return False
        try:
            token = Fence.handed_over(self._seen)
        except DatabaseError:
            self._on_database_error()
            return False
        if token is None or not self.backend.release_held_by(self.lease.name, token):
            return False
        taken = self.lease.try_acquire()
        if taken:
            logger.info(
                "lease.taken_over name=%s from=%s node=%s: the holder gave its term up",
                self.lease.name,
                node_of(token),
                self.node_id,
            )
        return taken
