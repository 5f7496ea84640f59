"""The admin as the control room: jobs, the run ledger and the cluster status page."""

from .cluster import ClusterStatusAdmin
from .jobs import JobDefinitionAdmin
from .runs import JobRunAdmin

__all__ = ["ClusterStatusAdmin", "JobDefinitionAdmin", "JobRunAdmin"]
