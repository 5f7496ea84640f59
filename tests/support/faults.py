"""A scheduler process that dies at a chosen point: the crash tests' seam.

``python -m tests.support.faults after_record NODE TTL POLL`` runs a real scheduler, built as
``run_scheduler`` builds it, whose dispatcher ends the process (exit 70) the first time it is
asked to send or prepare anything: right after the leader committed a batch of runs, before any
of their messages was built or sent. The product code has no hook for it: the dispatch port is
the seam.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

EXIT_CODE = 70


class DiesAfterRecord:
    """Wraps the project's dispatcher; ends the process before it sends or prepares."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def _die(self) -> None:
        logging.getLogger("django_cluster_cron.scheduler").error("fault.injected after_record")
        os._exit(EXIT_CODE)

    def publish(self, messages: Sequence[Any]) -> Any:
        if messages:
            self._die()
        return self.inner.publish(messages)

    def prepare(self, messages: Sequence[Any]) -> Any:
        if messages:
            self._die()
        return self.inner.prepare(messages)

    def send_prepared(self, groups: Sequence[Any], keep: set[int]) -> Any:
        return self.inner.send_prepared(groups, keep)


FAULTS = {"after_record": DiesAfterRecord}


def main(argv: list[str]) -> None:
    fault, node, ttl, poll = argv
    import django

    django.setup()
    from django_cluster_cron.dispatch import default_dispatcher
    from django_cluster_cron.scheduler import build_scheduler

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    scheduler = build_scheduler(
        node_id=node,
        ttl=float(ttl),
        poll_interval=float(poll),
        dispatcher=FAULTS[fault](default_dispatcher()),
    )
    scheduler.run()


if __name__ == "__main__":
    main(sys.argv[1:])
