"""Each overlap policy's timeline, slot by slot, with a real Celery prefork worker and a real
scheduler (whose sweeps release held runs and terminate): the table of docs/how-to/policies.md
("What happens at each slot"), played in order. A slot is recorded through the policy as the
leader records one (a run for that instant); a run "ends" when the test lets its body go, at
the moments the table's runs end (the first at 12:02:30, between the third and fourth slot).

After each step the test waits until the ledger settles into the state the table gives, so
the check does not depend on how fast the machine is: the statuses of the slots so far, in
slot order. At the end every run is let go, and the bodies' own witness rows say which slots
ran, in which order, and that no two ran at once where the policy forbids it."""

from __future__ import annotations

import itertools

import pytest
from django.conf import settings
from django.utils import timezone

from django_cluster_cron import actions
from django_cluster_cron.models import ACTIVE_STATUSES, JobRun, RunStatus
from tests.support.jobs import make_job
from tests.support.waiting import wait_for
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

R, B, S, D, C = "running", "buffered", "skipped", "success", "cancelled"
# buffer_one's waiting run: claimed by a pool process (running, in the ledger), its body not
# started until it takes the job's lock.
W = "waiting for the lock"
# The steps: record a slot ("slot"), or let the first slot's run end ("end 0", 12:02:30).
STEPS = ("slot", "slot", "slot", "end 0", "slot", "slot")
# For each policy: the statuses of the slots so far after each step, then after every run was
# let go, and the slots whose bodies ran, in the order they started. buffer_all holds 2.
TIMELINES = {
    "allow": (
        [[R], [R, R], [R, R, R], [D, R, R], [D, R, R, R], [D, R, R, R, R]],
        [D, D, D, D, D],
        None,  # overlapping: any order
    ),
    "skip": (
        [[R], [R, S], [R, S, S], [D, S, S], [D, S, S, R], [D, S, S, R, S]],
        [D, S, S, D, S],
        [0, 3],
    ),
    "buffer_one": (
        [[R], [R, W], [R, W, S], [D, R, S], [D, R, S, W], [D, R, S, W, S]],
        [D, D, S, D, S],
        [0, 1, 3],
    ),
    "buffer_all": (
        [[R], [R, B], [R, B, B], [D, R, B], [D, R, B, B], [D, R, B, B, S]],
        [D, D, D, D, S],
        [0, 1, 2, 3],
    ),
    "cancel_other": (
        [[R], [C, R], [C, C, R], [C, C, R], [C, C, C, R], [C, C, C, C, R]],
        [C, C, C, C, D],
        [0, 1, 2, 3, 4],
    ),
    "terminate_other": (
        [[R], [C, R], [C, C, R], [C, C, R], [C, C, C, R], [C, C, C, C, R]],
        [C, C, C, C, D],
        [0, 1, 2, 3, 4],
    ),
}


def statuses(runs: list[JobRun]) -> list[str]:
    found = dict(JobRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("pk", "status"))
    return [found[r.pk] for r in runs]


def body_started(run: JobRun) -> bool:
    return bool(Execution.objects.filter(label=f"timeline:{run.pk}").exists())


def let_go(run: JobRun) -> None:
    Execution.objects.get_or_create(
        label=f"go:timeline:{run.pk}", defaults={"pid": 0, "started_at": timezone.now()}
    )


@pytest.mark.parametrize("policy", sorted(TIMELINES))
def test_each_policy_plays_its_timeline_slot_by_slot(cluster, policy):
    steps, final, order = TIMELINES[policy]
    cluster.settings["RUN_HEARTBEAT_INTERVAL"] = 0.5
    cluster.worker("w", concurrency=5)
    cluster.wait_ready("w")
    cluster.start("leader")
    obeys = policy != "terminate_other"  # its bodies ignore the cancel: they are terminated
    job = make_job(
        task="tests.hold",
        args=["timeline"],
        kwargs={"obey_cancel": obeys},
        overlap_policy=policy,
        max_buffered=2,
        enabled=True,  # its schedule (once a year) never fires during the test
    )
    runs: list[JobRun] = []
    for step, expected in zip(STEPS, steps, strict=True):
        if step == "slot":
            runs.append(actions.run_now(job, by="timeline"))
        else:
            let_go(runs[0])

        def settled(expected: list[str] = expected) -> bool:
            # The statuses, and the body of every run shown running started (a minute passes
            # between two slots of the table).
            if statuses(runs) != [R if status == W else status for status in expected]:
                return False
            shown = zip(runs, expected, strict=True)
            return all(body_started(run) for run, status in shown if status == R)

        wait_for(
            settled,
            60,
            f"{policy}, after step {len(runs)} ({step}): {expected}",
            detail=lambda: f"{statuses(runs)}\n{cluster.log('w')[-3000:]}",
        )

    # Let everything go, one run at a time as each starts, until nothing of the job is active.
    def drained() -> bool:
        for run in runs:
            if body_started(run):
                let_go(run)
        # One query: a held run released between two would be seen by neither.
        left = (*ACTIVE_STATUSES, RunStatus.BUFFERED)
        return not JobRun.objects.filter(job=job, status__in=left).exists()

    wait_for(drained, 120, f"{policy}: every run to end", detail=lambda: str(statuses(runs)))
    assert statuses(runs) == final
    executions = {
        int(label.rsplit(":", 1)[1]): (started, finished)
        for label, started, finished in Execution.objects.filter(
            label__startswith="timeline:"
        ).values_list("label", "started_at", "finished_at")
    }
    index = {run.pk: i for i, run in enumerate(runs)}
    ran = sorted(executions, key=lambda pk: executions[pk][0])
    print(
        f"{policy}: slots run in this order: {[index[pk] for pk in ran]}; statuses {statuses(runs)}"
    )
    if order is None:
        assert len(ran) == len(runs)
        return
    assert [index[pk] for pk in ran] == order
    # Never two bodies at once: each started after the one before had finished.
    spans = [executions[pk] for pk in ran]
    for (_, earlier_end), (later_start, _) in itertools.pairwise(spans):
        if policy == "terminate_other":
            continue  # a terminated body never writes its end; the ledger's order is checked
        assert earlier_end is not None
        assert earlier_end <= later_start, (policy, spans)
    if policy == "terminate_other":
        terminated = JobRun.objects.filter(job=job, status=RunStatus.CANCELLED)
        assert all("terminated while running" in r.error for r in terminated), [
            r.error for r in terminated
        ]


@pytest.mark.skipif(not settings.HAS_DJANGO_TASKS, reason="django-tasks-db is not installed")
@pytest.mark.parametrize("lease_kind", ["database"])
@pytest.mark.parametrize("policy", ["buffer_all", "cancel_other"])
def test_the_holding_policies_on_django_tasks_db_workers(cluster, policy):
    """buffer_all and cancel_other on a django.tasks backend: held runs are released and
    enqueued on it when the run ahead ends, in slot order; cancel_other's cooperative cancel
    reaches the body through the heartbeat."""
    cluster.settings["RUN_HEARTBEAT_INTERVAL"] = 0.5
    cluster.db_worker("dbw")
    cluster.wait_db_worker("dbw")
    cluster.start("leader")
    job = make_job(
        task="tests.testapp.dtasks.until_cancelled",
        args=["dj-timeline", 4],
        overlap_policy=policy,
        enabled=True,
    )
    first = actions.run_now(job, by="timeline")
    wait_for(lambda: statuses([first]) == [R], 60, "the first run to start")
    second = actions.run_now(job, by="timeline")
    third = actions.run_now(job, by="timeline")
    runs = [first, second, third]
    if policy == "buffer_all":
        assert statuses(runs) == [R, B, B]
        finals = [[D, D, D]]
    else:
        # The first stops at the cancel the second asked for; the third supersedes the second
        # while it waits (or, on a slow machine, cancels it once it started).
        finals = [[C, S, D], [C, C, D]]
    wait_for(
        lambda: statuses(runs) in finals,
        90,
        f"{policy} on django.tasks: one of {finals}",
        detail=lambda: f"{statuses(runs)}\n{cluster.log('dbw')[-3000:]}",
    )
    spans = sorted(
        Execution.objects.filter(label="dj-timeline").values_list("started_at", "finished_at")
    )
    assert len(spans) == len(runs) - statuses(runs).count(S)
    for (_, earlier_end), (later_start, _) in itertools.pairwise(spans):
        assert earlier_end <= later_start, spans
