"""The cluster lock's public import path (the lock lives in :mod:`django_cluster_cron.leases.lock`).

from django_cluster_cron.locks import cluster_lock, SKIPPED
"""

from .leases.lock import SKIPPED, ClusterLock, LockNotAcquired, LockUnavailable, cluster_lock

__all__ = ["SKIPPED", "ClusterLock", "LockNotAcquired", "LockUnavailable", "cluster_lock"]
