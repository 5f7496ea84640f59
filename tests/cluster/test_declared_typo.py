"""A typo in one job declared in code leaves every other job running: the deploy's
``sync_jobs`` syncs the valid declarations (and exits 1 naming the bad one), and a real
``run_scheduler`` process with the same settings starts and dispatches the valid job."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.any_database, pytest.mark.timeout(180)]

JOBS = {
    "typo": {"task": "tests.add", "schedule": "61 * * * *", "args": [1, 2]},
    "every-second": {
        "task": "tests.add",
        "schedule": "* * * * * *",
        "args": [1, 2],
        "catchup_policy": "all",
        "catchup_window": 300,
    },
}


def test_a_typod_declaration_leaves_every_other_job_running(cluster: Any) -> None:
    env = {**cluster.env, "TEST_CLUSTER_CRON": json.dumps({**cluster.settings, "JOBS": JOBS})}
    synced = subprocess.run(
        [sys.executable, "-m", "django", "sync_jobs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert synced.returncode == 1, (synced.stdout, synced.stderr)
    assert "create    every-second" in synced.stdout
    assert "invalid   typo (schedule: minute field: '61'" in synced.stdout
    assert "SystemCheckError" not in synced.stderr
    job = JobDefinition.objects.get(name="every-second")
    assert not JobDefinition.objects.filter(name="typo").exists()

    cluster.start("node-a", settings={"JOBS": JOBS})
    dispatched = wait_for(
        lambda: (
            JobRun.objects.filter(job=job, queued_at__isnull=False)
            .exclude(status=RunStatus.MISSED)
            .first()
        ),
        90,
        "the scheduler to dispatch a run of the valid declared job",
        detail=lambda: cluster.log("node-a"),
    )
    assert dispatched.dispatched_by == "node-a"
    log = cluster.log("node-a")
    assert "cluster_cron.W005" in log  # the checks warned, and the scheduler ran on
    assert "Declared job 'typo'" in log
