"""Publishing recorded runs to Celery.

Each run is sent as the app's ``django_cluster_cron.execute_run`` task with the run's
deterministic task id, the job's queue/priority/expiry and headers naming the run, so a copy
published twice (outbox re-publish, a stale leader) is recognisable and the worker's claim drops
it. A batch reuses one producer (one broker connection) for all its messages.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from celery import Celery

from .store import OutboxMessage

logger = logging.getLogger("django_cluster_cron.scheduler")

EXECUTE_TASK = "django_cluster_cron.execute_run"
# Fail fast when the broker is down: the run stays ``pending`` and the outbox re-publishes it, so
# a long in-process retry would only delay the rest of the tick.
PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}


class PublishFailed(Exception):
    """The broker refused or could not be reached; ``published`` lists what got through."""

    def __init__(self, published: list[str], cause: BaseException) -> None:
        super().__init__(f"publish failed after {len(published)} messages: {cause}")
        self.published = published
        self.cause = cause


class CeleryDispatcher:
    def __init__(self, app: Celery | None = None) -> None:
        if app is None:
            from .celery_app import get_celery_app

            app = get_celery_app()
        self.app = app

    def publish(self, messages: Sequence[OutboxMessage]) -> list[str]:
        """Publish in order; return the task ids that reached the broker.

        Stops at the first failure with :class:`PublishFailed`: the caller marks what was
        published and leaves the rest ``pending`` for the outbox.
        """
        published: list[str] = []
        if not messages:
            return published
        try:
            with self.app.producer_or_acquire() as producer:
                for message in messages:
                    self.app.send_task(
                        EXECUTE_TASK,
                        args=[message.run_id, message.attempt],
                        task_id=message.task_id,
                        producer=producer,
                        retry=True,
                        retry_policy=PUBLISH_RETRY_POLICY,
                        headers=headers_for(message),
                        **routing_for(message),
                    )
                    published.append(message.task_id)
        except Exception as exc:  # kombu, amqp, redis and socket errors alike
            raise PublishFailed(published, exc) from exc
        return published


def headers_for(message: OutboxMessage) -> dict[str, Any]:
    return {
        "cluster_cron_run": message.run_id,
        "cluster_cron_job": message.job_id,
        "cluster_cron_slot": message.scheduled_for.isoformat(),
        "cluster_cron_attempt": message.attempt,
        "cluster_cron_epoch": message.epoch,
        "cluster_cron_trigger": message.trigger,
    }


def routing_for(message: OutboxMessage) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if message.queue:
        options["queue"] = message.queue
    if message.priority is not None:
        options["priority"] = message.priority
    if message.expires is not None:
        options["expires"] = message.expires
    if message.soft_time_limit:
        options["soft_time_limit"] = message.soft_time_limit
    if message.time_limit:
        options["time_limit"] = message.time_limit
    if message.eta is not None:
        options["eta"] = message.eta
    return options
