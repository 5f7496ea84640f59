"""The ``auto`` message form in a cluster with no worker of an earlier release: once a worker
has first answered, no run goes out as the ``execute_run`` wrapper — not while a worker
restarts, not after the leader is killed (issue 44, item 3: Flower showed the wrapper, and a
failing job as SUCCESS, for ~40 s of a new install, ~38 s after any worker restart and ~9 s after
each failover). The witness is the workers' own log (what Celery received), not the ledger.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.models import JobRun
from tests.support.cluster import every_second_job, sent_by
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.any_database,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
]

RECEIVED = re.compile(r"Task ([\w.]+)\[([\w-]+)\] received")


def received(cluster, *workers: str) -> dict[str, str]:
    """Task id -> the task name Celery received it as, on these workers."""
    found = {}
    for name in workers:
        for task, task_id in RECEIVED.findall(cluster.log(name)):
            found[task_id] = task
    return found


def test_after_the_first_answer_no_run_goes_as_the_wrapper(cluster):
    # The default probe interval (30 s): what a new user has.
    cluster.settings.update({"MESSAGE_FORM": "auto"})
    job = every_second_job("form")
    for node in ("a", "b"):
        cluster.start(node)
    started = time.monotonic()
    cluster.worker("w1")
    cluster.wait_ready("w1")
    ready = time.monotonic()

    def deciding() -> str | None:
        for node in ("a", "b"):
            if "dispatch.message_form form=task" in cluster.log(node):
                return node
        return None

    leader = wait_for(deciding, 60, "the leader to hear the worker's first answer")
    decided = database_now()
    print(
        f"new cluster: the job's own task {time.monotonic() - ready:.1f} s after the worker "
        f"was ready ({ready - started:.1f} s after the schedulers started)"
    )

    # A worker restart: while it is away no one answers the probes.
    cluster.procs["w1"].send_signal(signal.SIGTERM)
    assert cluster.procs["w1"].wait(60) == 0
    restarted = database_now()
    cluster.worker("w2")
    cluster.wait_ready("w2")
    wait_for(
        lambda: (
            JobRun.objects.filter(job=job, scheduled_for__gt=restarted)
            .exclude(started_at=None)
            .count()
            >= 3
        ),
        60,
        "three runs on the restarted worker",
    )

    # A failover: the leader killed, the standby leads with no probe of its own yet.
    standby = "b" if leader == "a" else "a"
    cluster.procs[leader].kill()
    killed = database_now()
    wait_for(lambda: sent_by(standby, job, after=killed), 60, "the standby to send runs")
    later = database_now()
    wait_for(
        lambda: (
            JobRun.objects.filter(job=job, scheduled_for__gt=later).exclude(started_at=None).count()
            >= 3
        ),
        60,
        "three runs under the new leader",
    )

    forms = received(cluster, "w1", "w2")
    after = dict(
        JobRun.objects.filter(job=job, scheduled_for__gt=decided).values_list("task_id", "pk")
    )
    assert after, "no run after the decision"
    wrapped = sorted(t for t in after if forms.get(t) == "django_cluster_cron.execute_run")
    assert not wrapped, f"{len(wrapped)} of {len(after)} runs after the first answer went wrapped"
    assert {forms[t] for t in after if t in forms} == {"tests.add"}
    before = [t for t, task in forms.items() if task == "django_cluster_cron.execute_run"]
    print(
        f"runs sent as the wrapper before the first answer: {len(before)}; after it: 0 of "
        f"{len(after)} (a worker restart and a failover included)"
    )
