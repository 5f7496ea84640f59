"""A backlog longer than the outbox's wait costs no copy: a real scheduler, a real worker slower
than the burst, a real broker. Every run waits in the queue far past ``OUTBOX_REPUBLISH_AFTER``;
the worker keeps taking runs, so none is sent again and none is delivered twice.
"""

from __future__ import annotations

from datetime import timedelta

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from tests.support.waiting import wait_for

JOBS = 25
BODY = 1.0  # seconds a run takes: the worker drains the burst in about JOBS x BODY = 25 s
# Far more than a claim's gap (BODY, and a loaded machine's stall on top), far less than the
# last run's wait.
REPUBLISH_AFTER = 6.0


def test_a_burst_waiting_behind_a_slow_worker_is_not_sent_again(cluster):
    cluster.worker("w1")
    cluster.wait_ready("w1")
    cluster.start("s1", settings={"OUTBOX_REPUBLISH_AFTER": REPUBLISH_AFTER})
    cluster.wait_started("s1")
    # One instant, a few seconds ahead, for every job (a six-field cron: seconds last).
    fire = (database_now() + timedelta(seconds=6)).replace(microsecond=0)
    cron = f"{fire.minute} {fire.hour} {fire.day} {fire.month} * {fire.second}"
    for i in range(JOBS):
        job = JobDefinition(
            name=f"burst-{i}", cron=cron, timezone="UTC", task="tests.sleep", args=[BODY]
        )
        job.full_clean()
        job.save()
    wait_for(
        lambda: JobRun.objects.filter(status=RunStatus.SUCCESS).count() == JOBS,
        120,
        f"the {JOBS} runs to finish",
    )
    runs = JobRun.objects.all()
    assert runs.count() == JOBS
    waited = max((run.started_at - run.scheduled_for).total_seconds() for run in runs)
    assert waited > 3 * REPUBLISH_AFTER, f"the burst did not wait in a backlog ({waited:.1f} s)"
    copies = {run.task_id: run.publish_count for run in runs if run.publish_count != 1}
    assert copies == {}, f"runs sent more than once: {copies}"
    assert "runs.republish" not in cluster.log("s1")
    assert "run.duplicate_delivery" not in cluster.log("w1")
