"""The scheduler: the leader that records each due slot as a run and sends it, and the standbys
that wait to take over. :class:`~.loop.Scheduler` is the loop, composed of parts (see its
module); ``build_scheduler`` wires one to the project's lease, database and dispatcher
(``manage.py run_scheduler`` uses it).
"""

from .build import build_scheduler, default_node_id
from .loop import Scheduler

__all__ = ["Scheduler", "build_scheduler", "default_node_id"]
