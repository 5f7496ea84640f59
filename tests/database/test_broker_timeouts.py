"""The scheduler's publishing connection bounds its waits on the broker (run_scheduler adds the
transport options the project's Celery configuration lacks): on Redis a publish through a link
gone silent (a real TCP proxy, tests/support/netfault.py) fails instead of blocking; on RabbitMQ
py-amqp is given its read and write timeouts."""

from __future__ import annotations

import uuid

import pytest
from celery import Celery

from django_cluster_cron.dispatch import PublishFailed
from django_cluster_cron.dispatch.celery import CeleryDispatcher
from django_cluster_cron.dispatch.celery.timeouts import (
    BROKER_TIMEOUTS,
    bound_broker_waits,
    transport_kind,
)
from tests.support.jobs import outbox_message
from tests.support.netfault import links, url_through  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(90)


def app_for(url: str, **conf: object) -> Celery:
    app = Celery(f"bounded-{uuid.uuid4().hex[:6]}", broker=url, set_as_current=False)
    app.conf.update(conf)
    return app


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("redis://127.0.0.1:6379/0", "redis"),
        ("rediss://h:6380/1", "redis"),
        ("sentinel://h:26379;sentinel://g:26379", "redis"),
        ("amqp://guest:guest@127.0.0.1:5672//", "amqp"),
        ("pyamqp://h//", "amqp"),
        ("amqps://h//", "amqp"),
        ("memory://", None),
        ("sqs://", None),
        ("", None),
    ],
)
def test_the_transport_is_told_by_the_broker_url(url, kind):
    assert transport_kind(url) == kind


def test_the_options_the_project_sets_are_kept():
    app = app_for("redis://127.0.0.1:1/0", broker_transport_options={"socket_timeout": 30})
    added = bound_broker_waits(app)
    assert "socket_timeout" not in added
    options = app.conf.broker_transport_options
    assert options["socket_timeout"] == 30
    assert options["socket_connect_timeout"] == BROKER_TIMEOUTS["redis"]["socket_connect_timeout"]
    assert bound_broker_waits(app_for("memory://")) == {}


def test_a_publish_through_a_redis_link_gone_silent_fails_instead_of_blocking(
    redis_url,
    links,  # noqa: F811 (the fixture)
):
    link = links(redis_url)
    app = app_for(url_through(redis_url, link))
    assert bound_broker_waits(app) == BROKER_TIMEOUTS["redis"]
    dispatcher = CeleryDispatcher(app, own_task=False)
    first = outbox_message()
    assert dispatcher.publish([first]) == [first.task_id]
    link.silence()
    with pytest.raises(PublishFailed):
        dispatcher.publish([outbox_message()])


def test_rabbitmq_publishing_gets_read_and_write_timeouts(rabbitmq_url):
    app = app_for(rabbitmq_url)
    bound_broker_waits(app)
    with app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1)
        amqp_connection = connection.connection
        assert amqp_connection.read_timeout == BROKER_TIMEOUTS["amqp"]["read_timeout"]
        assert amqp_connection.write_timeout == BROKER_TIMEOUTS["amqp"]["write_timeout"]
