"""Celery's task events as a monitor receives them: what Flower and ``celery events`` read,
captured by the tests of what Celery's tools see (the ``events`` fixture)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from django_cluster_cron.celery_app import get_celery_app
from tests.support.waiting import wait_for


class EventStream:
    """Celery's task events as a monitor receives them (the receiver Flower is built on)."""

    def __init__(self) -> None:
        self.app = get_celery_app()
        self.events: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._capture, daemon=True)
        self.thread.start()

    def _capture(self) -> None:
        with self.app.connection_for_read() as connection:
            receiver = self.app.events.Receiver(connection, handlers={"*": self.events.append})
            while not self.stop.is_set():
                try:
                    receiver.capture(limit=None, timeout=1.0, wakeup=False)
                except TimeoutError:
                    continue

    def of(self, task_id: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e.get("uuid") == task_id and e["type"] == kind]

    def wait(self, task_id: str, kind: str, timeout: float = 60) -> Any:
        found = wait_for(lambda: self.of(task_id, kind), timeout, f"{kind} event")
        return found[0]

    def wait_subscribed(self) -> None:
        """Until the stream sees events: a plain task sent until its task-received arrives."""
        from tests.testapp.tasks import add

        def seen() -> bool:
            probe = str(uuid.uuid4())
            add.apply_async((0, 0), task_id=probe)
            try:
                wait_for(lambda: self.of(probe, "task-received"), 2, "probe")
            except AssertionError:
                return False
            return True

        wait_for(seen, 60, "the event stream to receive")


@pytest.fixture
def events() -> Iterator[EventStream]:
    """The task events of this test's workers (start them with ``-E``)."""
    stream = EventStream()
    yield stream
    stream.stop.set()
    stream.thread.join(timeout=10)
