"""The outbox sends a waiting run again only on a sign that its message is lost.

Against the real database: runs sent at T, their ``republish_at`` passed, and what workers took
from their queue lately. A queue that is moving holds its waiting runs back (they are in a
backlog); a queue that stalled, or from which a run sent later was taken first, gives them up.
The same through the leader's sweep, with the real broker: a long backlog costs no copy, a
queue the broker emptied gets its runs back.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone as dj_timezone

from django_cluster_cron.ledger.outbox import queue_progress, stale_pending
from django_cluster_cron.models import JobRun, RunStatus, RunTrigger
from tests.support.inprocess import T0, Clock, job, queued_messages
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = timedelta(seconds=30)  # OUTBOX_REPUBLISH_AFTER in these tests
NOW = T0 + timedelta(seconds=90)


@pytest.fixture(autouse=True)
def republish_after(settings):
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "OUTBOX_REPUBLISH_AFTER": WAIT.total_seconds(),
        "DEFAULT_QUEUE": "celery",
    }


def sent(made, slot, at, status=RunStatus.QUEUED):
    """A run of ``made`` for ``slot``, first sent at ``at``; its ``republish_at`` one wait later."""
    return JobRun.objects.create(
        job=made,
        scheduled_for=slot,
        task_id=made.task_id_for(slot),
        trigger=RunTrigger.SCHEDULE,
        status=status,
        publish_count=1,
        queued_at=at,
        republish_at=at + WAIT,
    )


def taken(run, at):
    """A worker claimed ``run`` at ``at``."""
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, started_at=at)


def overdue(now=NOW):
    progress = queue_progress(now=now, window=WAIT)
    return sorted(
        m.run_id for m in stale_pending(now=now, older_than=WAIT, limit=100, progress=progress)
    )


def burst(made_jobs, at=T0):
    return [sent(made, T0, at) for made in made_jobs]


def test_a_queue_no_worker_took_from_gives_up_its_waiting_runs():
    runs = burst([job(f"stalled-{i}") for i in range(3)])
    # Something was taken from the queue, but longer ago than the window: stalled.
    taken(runs[0], NOW - WAIT - timedelta(seconds=1))
    assert overdue() == [r.pk for r in runs[1:]]


def test_a_moving_backlog_keeps_its_runs_however_long_they_wait():
    runs = burst([job(f"backlog-{i}") for i in range(4)])
    taken(runs[0], NOW - timedelta(seconds=5))
    assert overdue() == []
    # An hour on, still draining the same burst: still nothing sent again.
    later = NOW + timedelta(hours=1)
    taken(runs[1], later - timedelta(seconds=1))
    assert overdue(later) == []


def test_a_run_overtaken_by_one_sent_after_its_republish_time_is_lost():
    made = [job(f"overtaken-{i}") for i in range(3)]
    first, second = burst(made[:2])
    # Sent within the wait after them: taken first, but prefetching workers reorder that much.
    close = sent(made[2], T0 + timedelta(minutes=1), T0 + WAIT - timedelta(seconds=1))
    taken(close, NOW - timedelta(seconds=2))
    assert overdue() == []
    # Sent after their republish time and taken before them: their messages are gone.
    after = sent(made[2], T0 + timedelta(minutes=2), T0 + WAIT + timedelta(seconds=5))
    taken(after, NOW - timedelta(seconds=1))
    assert overdue() == [first.pk, second.pk]


def test_only_the_same_queue_and_priority_count_as_progress():
    default = burst([job("default-queue")])
    reports = burst([job("reports-queue", queue="reports")])
    urgent = burst([job("urgent", priority=9)])
    # A worker takes from the default queue at priority unset (a job with the queue left empty
    # and one naming the default queue are one queue): only that queue is moving.
    named_default = sent(job("named-default", queue="celery"), T0 + timedelta(minutes=1), T0)
    taken(named_default, NOW - timedelta(seconds=3))
    assert overdue() == sorted(r.pk for r in [*reports, *urgent])
    assert default[0].pk not in overdue()


def test_runs_never_sent_are_sent_whatever_the_queue_does():
    made = job("never-sent")
    moving = burst([job("moving")])
    taken(moving[0], NOW - timedelta(seconds=1))
    recorded = JobRun.objects.create(
        job=made,
        scheduled_for=T0,
        due_at=T0,
        task_id=made.task_id_for(T0),
        trigger=RunTrigger.SCHEDULE,
        status=RunStatus.PENDING,
    )
    assert overdue() == [recorded.pk]


def test_the_leaders_sweep_holds_a_draining_backlog_and_resends_a_stalled_one(
    make_scheduler, redis_client, settings
):
    """Through the scheduler's sweep and the real broker, on the scheduler's clock: runs waiting
    past their re-publish time in a queue that a worker is draining stay as they are; once
    nothing has been taken for the window (the broker lost them), they are sent again."""
    wait = timedelta(seconds=0.4)
    settings.CLUSTER_CRON = {
        **settings.CLUSTER_CRON,
        "OUTBOX_REPUBLISH_AFTER": wait.total_seconds(),
    }
    now = dj_timezone.now()
    clock = Clock(now)
    runs = [
        JobRun.objects.create(
            job=made,
            scheduled_for=now,
            task_id=made.task_id_for(now),
            trigger=RunTrigger.MANUAL,
            status=RunStatus.QUEUED,
            publish_count=1,
            queued_at=now,
            republish_at=now + wait,
        )
        for made in [job(f"drained-{i}", cron="0 0 1 1 *") for i in range(3)]
    ]
    waiting = JobRun.objects.filter(pk__in=[r.pk for r in runs[1:]])
    scheduler = make_scheduler("node-a", clock)
    # Past their re-publish time, while a worker has just taken one of the queue's runs.
    taken(runs[0], now + wait + timedelta(seconds=0.1))
    clock.now = now + wait + timedelta(seconds=0.2)
    scheduler.step()
    assert list(waiting.values_list("publish_count", flat=True)) == [1, 1]
    assert queued_messages(redis_client) == []
    # A whole window with nothing taken: the next sweep (due half a wait later, on the monotonic
    # clock) sends them again.
    clock.now = now + 3 * wait

    def resent() -> set[str]:
        scheduler.step()
        return {m["headers"]["id"] for m in queued_messages(redis_client)}

    assert wait_for(resent, 30, "the sweep to send the runs again") == {r.task_id for r in runs[1:]}
    assert sorted(waiting.values_list("publish_count", flat=True)) == [2, 2]
