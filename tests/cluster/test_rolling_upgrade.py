"""A rolling deploy across the change of message form, either way round, with the previous
release's own code in real processes (its app and its tests, from git history).

Before it, a run went out as ``django_cluster_cron.execute_run(run_id, attempt)``; now as the
job's own task. A worker of the previous release would run a job's task message as a plain call
(no claim, no ledger), so the leader sends the job's task only once every worker says it claims
such messages (``MESSAGE_FORM = "auto"``); and new workers still run ``execute_run`` messages, a
previous leader's or those queued before the deploy.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_cluster_cron.models import JobRun, RunStatus
from tests.support.cluster import assert_every_slot_once, every_second_job
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.any_database, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
# The last commit whose leader sent only execute_run and whose workers knew no other form.
PREVIOUS = "a4206fedb497045a9c22304dc9814bbad4388b06"


@pytest.fixture(scope="module")
def previous_release() -> Iterator[Path]:
    """The previous release's ``django_cluster_cron`` and ``tests``, unpacked from git."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs the project's git history (a clone, not an sdist)")
    where = Path(tempfile.mkdtemp(prefix="previous-release-"))
    paths = ["django_cluster_cron", "tests"]
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS, *paths],
        check=True,
        capture_output=True,
    ).stdout
    archive_path = where / "previous.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(where, filter="data")
    yield where
    shutil.rmtree(where, ignore_errors=True)


def assert_every_run_sent_succeeded(cluster, job) -> None:
    """Once the runs sent have finished: every slot has one run, and every run that was sent
    succeeded (runs recorded ahead of their time stay ``pending`` for the next leader)."""
    sent = JobRun.objects.filter(job=job).exclude(status=RunStatus.PENDING)
    unfinished = sent.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING])

    def which() -> str:
        runs = list(unfinished.values_list("id", "scheduled_for", "status", "task_id"))
        logs = "\n".join(f"--- {name}\n{cluster.log(name)[-6000:]}" for name in cluster.procs)
        return f"unfinished: {runs}\n{logs}"

    wait_for(lambda: not unfinished.exists(), 60, "every run sent to finish", detail=which)
    assert_every_slot_once(job)
    assert set(sent.values_list("status", flat=True)) == {RunStatus.SUCCESS}


def successes(job, at_least: int) -> bool:
    return bool(JobRun.objects.filter(job=job, status=RunStatus.SUCCESS).count() >= at_least)


def test_a_new_leader_sends_old_workers_the_old_form_then_the_jobs_task(cluster, previous_release):
    auto = {"MESSAGE_FORM": "auto", "MESSAGE_FORM_PROBE_INTERVAL": 1}
    cluster.worker("old", code=previous_release)
    cluster.wait_ready("old")
    job = every_second_job("upgrade")
    cluster.start("a", settings=auto)
    wait_for(lambda: successes(job, 5), 60, "five runs on the previous release's worker")
    # The old worker ran them through execute_run; the leader never switched.
    old_log = cluster.log("old")
    assert "Task django_cluster_cron.execute_run[" in old_log
    assert "Task tests.add[" not in old_log
    assert "form=task" not in cluster.log("a")

    cluster.worker("new")
    cluster.wait_ready("new")
    cluster.procs["old"].send_signal(signal.SIGTERM)
    assert cluster.procs["old"].wait(60) == 0
    # The old worker is forgotten once silent for FORGET_AFTER probes, then AGREE probes switch.
    wait_for(lambda: "dispatch.message_form form=task" in cluster.log("a"), 180, "the switch")
    assert "dispatch.form_worker_gone" in cluster.log("a")
    wait_for(lambda: "Task tests.add[" in cluster.log("new"), 60, "the job's own task received")
    settled = JobRun.objects.filter(job=job).count()
    wait_for(lambda: successes(job, settled + 3), 60, "three more runs after the switch")
    cluster.procs["a"].send_signal(signal.SIGTERM)
    assert cluster.procs["a"].wait(60) == 0
    # Every slot once; every run sent succeeded, whichever form and worker it went through.
    assert_every_run_sent_succeeded(cluster, job)


def test_an_old_worker_that_cannot_answer_for_a_while_still_holds_the_old_form(
    cluster, previous_release
):
    """A worker of the previous release stopped (SIGSTOP: a loaded host, a blocked event loop)
    misses probes while a new worker answers them all: the leader keeps the old form, which the
    old worker, once it goes on, would otherwise run as a plain call."""
    auto = {"MESSAGE_FORM": "auto", "MESSAGE_FORM_PROBE_INTERVAL": 1}
    cluster.worker("old", code=previous_release)
    cluster.worker("new")
    cluster.wait_ready("old")
    cluster.wait_ready("new")
    job = every_second_job("paused")
    cluster.start("a", settings=auto)
    wait_for(lambda: successes(job, 3), 60, "three runs")
    old = cluster.procs["old"]
    old.send_signal(signal.SIGSTOP)
    try:
        # More probes than AGREE in a row without the old worker, fewer than FORGET_AFTER.
        wait_for(lambda: "silent_probes=5" in cluster.log("a"), 120, "five silent probes")
    finally:
        old.send_signal(signal.SIGCONT)
    settled = JobRun.objects.filter(job=job).count()
    wait_for(lambda: successes(job, settled + 3), 60, "three more runs")
    for name in ("a", "old"):
        cluster.procs[name].send_signal(signal.SIGTERM)
        assert cluster.procs[name].wait(60) == 0
    assert "dispatch.message_form form=task" not in cluster.log("a")
    assert "Task tests.add[" not in cluster.log("old")
    assert_every_run_sent_succeeded(cluster, job)


def test_new_workers_run_what_a_previous_leader_sends(cluster, previous_release):
    cluster.worker("new")
    cluster.wait_ready("new")
    job = every_second_job("downgrade")
    cluster.start("old-leader", code=previous_release)
    wait_for(lambda: successes(job, 5), 60, "five runs sent by the previous release's leader")
    assert "Task django_cluster_cron.execute_run[" in cluster.log("new")
    cluster.procs["old-leader"].send_signal(signal.SIGTERM)
    assert cluster.procs["old-leader"].wait(60) == 0
    # Every slot once; every run sent succeeded, whichever form and worker it went through.
    assert_every_run_sent_succeeded(cluster, job)
