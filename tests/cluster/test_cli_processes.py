"""``manage.py cron`` as a deploy pipeline runs it: a real subprocess, a real Celery worker.
``trigger --wait`` follows its run to the end and exits 0 only when it succeeded: 1 when it
failed or when the wait timed out; a usage error exits 2; a refusal exits 1 with the reason on
stderr. In process, every verb: tests/database/test_cli.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from django_cluster_cron.models import JobRun, RunStatus
from tests.support.jobs import make_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def cron(cluster, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(cluster.env)
    env["TEST_CLUSTER_CRON"] = json.dumps(cluster.settings)
    return subprocess.run(
        [sys.executable, "-m", "django", "cron", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_trigger_wait_exits_with_the_runs_outcome(cluster):
    cluster.worker("w")
    cluster.wait_ready("w")
    good = make_job(task="tests.add", args=[2, 3])
    done = cron(cluster, "trigger", good.name, "--wait", "--timeout", "90", "--json")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["run"]["status"] == "success"
    assert reply["timed_out"] is False
    assert JobRun.objects.get(pk=reply["run"]["id"]).status == RunStatus.SUCCESS

    bad = make_job(task="tests.fail")
    failed = cron(cluster, "trigger", bad.name, "--wait", "--timeout", "90")
    assert failed.returncode == 1
    assert "ended failed" in failed.stdout
    assert "ended failed" in failed.stderr  # the reason, where a pipeline's log shows it

    echo = make_job(task="tests.echo", kwargs={"region": "eu", "day": "any"})
    given = cron(
        cluster, "trigger", echo.name, "--kwargs", '{"day": "2026-11-29"}', "--wait", "--json"
    )
    assert given.returncode == 0, given.stderr
    result = JobRun.objects.get(pk=json.loads(given.stdout)["run"]["id"]).result
    assert "'day': '2026-11-29'" in result
    assert "'region': 'eu'" in result

    slow = make_job(task="tests.sleep", args=[30])
    waited = cron(cluster, "trigger", slow.name, "--wait", "--timeout", "1", "--json")
    assert waited.returncode == 1
    assert json.loads(waited.stdout)["timed_out"] is True


def test_usage_errors_exit_2_and_refusals_exit_1_with_the_reason(cluster):
    usage = cron(cluster, "list", "--no-such-option")
    assert usage.returncode == 2
    assert "unrecognized arguments: --no-such-option" in usage.stderr
    refused = cron(cluster, "describe", "no-such-job")
    assert refused.returncode == 1
    assert "No job named 'no-such-job'" in refused.stderr
    assert refused.stdout == ""


def test_a_pipeline_pauses_lists_and_resumes_as_the_os_user_at_this_host(cluster):
    import getpass
    import socket

    from django_cluster_cron.models import JobChange

    job = make_job(task="tests.add", args=[1, 2], enabled=True)
    paused = cron(cluster, "pause", job.name, "--note", "deploy in progress")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.strip() == f"Paused {job.name}: deploy in progress"
    listed = json.loads(cron(cluster, "list", "--paused", "--json").stdout)
    assert [(j["name"], j["pause_note"]) for j in listed["jobs"]] == [
        (job.name, "deploy in progress")
    ]
    entry = JobChange.objects.filter(job=job).latest("pk")
    assert entry.actor == f"{getpass.getuser()}@{socket.gethostname()}"
    assert entry.via == "cli"
    assert cron(cluster, "resume", job.name).returncode == 0
    job.refresh_from_db()
    assert job.enabled
