"""What the admin tells operators of jobs declared in code that the sync leaves out: the jobs
list and the cluster page list them with why, a job's page says its declaration is invalid."""

from __future__ import annotations

import logging

from ..declared import Rejected, collect

logger = logging.getLogger("django_cluster_cron.admin")


def left_out() -> list[Rejected]:
    """The declarations of this process's code that a sync leaves out ([] if they cannot be
    read at all, say a task module fails to import: a page must still show)."""
    try:
        return collect().rejected
    except Exception as exc:  # a broken task module is the project's error, not the page's
        logger.warning("admin.declarations_unread %s: %s", type(exc).__name__, exc)
        return []


def left_out_note(name: str) -> str:
    """For the page of a job declared in code: why its declaration is not synced, or ""."""
    for rejected in left_out():
        if rejected.name == name:
            return (
                f". Its declaration is invalid and left out of the sync: {rejected.text()} "
                "The job keeps its last synced definition until the declaration is fixed."
            )
    return ""
