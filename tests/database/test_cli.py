"""``manage.py cron`` driven as an operator drives it, in process (``call_command``): each verb's
text and JSON, its exit status, refusals in the admin's words, and the actor in the job's audit
trail. As real processes with a real worker (``trigger --wait``):
tests/cluster/test_cli_processes.py.
"""

from __future__ import annotations

import io
import json
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from django_cluster_cron.models import JobChange, JobDefinition, JobRun, RunStatus
from tests.support.jobs import make_run
from tests.support.querycount import count_queries

pytestmark = pytest.mark.django_db(transaction=True)


def make_job(name, task="tests.record", args=None, **fields) -> JobDefinition:
    """A job named ``name`` (paused unless ``enabled=True``)."""
    fields.setdefault("enabled", False)
    job = JobDefinition(
        name=name,
        cron=fields.pop("cron", "0 0 1 1 *"),
        timezone=fields.pop("timezone", "UTC"),
        task=task,
        args=["made"] if args is None and task == "tests.record" else (args or []),
        **fields,
    )
    job.full_clean()
    job.save()
    return job


def cron(*args: str) -> tuple[str, str]:
    """Run ``cron`` with ``args``; (stdout, stderr). A refusal raises CommandError."""
    out, err = io.StringIO(), io.StringIO()
    call_command("cron", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def as_json(*args: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(cron(*args, "--json")[0])
    return found


def refused(*args: str, code: int = 1) -> CommandError:
    with pytest.raises(CommandError) as caught:
        cron(*args)
    assert caught.value.returncode == code
    return caught.value


def test_list_shows_each_job_soonest_first_in_one_query():
    soon = make_job("soon", enabled=True, cron="*/5 * * * *", timezone="Europe/Paris")
    later = make_job("later", enabled=True, cron="0 3 * * *")
    paused = make_job("paused-one")
    paused.pause("vendor down")
    make_run(soon, status=RunStatus.FAILED)
    with count_queries() as log:
        text, _ = cron("list")
    # One statement reads every job (on PostgreSQL a SET LOCAL beside it turns off compiling).
    statements = [sql for sql, _ in log.queries if not sql.startswith("SET ")]
    assert len(statements) == 1
    assert statements[0].startswith("SELECT")
    assert ("jit = off" in str(log.queries)) == (connection.vendor == "postgresql")
    if connection.vendor == "mysql":
        # Each job's last run through the (job, slot) index: MariaDB chose the (job, status,
        # slot) one and sorted every job's runs (10 s for 1,000 jobs and 2 M runs).
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as sent:  # as the server got it
            cron("list")
        (listing,) = [q["sql"] for q in sent.captured_queries]
        assert "FORCE INDEX (`cluster_cron_run_one_per_slot`)" in listing
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + listing)
            columns = [c[0] for c in cursor.description]
            plan = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        (runs,) = [row for row in plan if row["select_type"] == "DEPENDENT SUBQUERY"]
        assert runs["key"] == "cluster_cron_run_one_per_slot", plan
        assert "filesort" not in (runs["Extra"] or ""), plan
    lines = text.splitlines()
    assert lines[0].split() == [
        "NEXT",
        "LEFT",
        "LAST",
        "RESULT",
        "JOB",
        "SCHEDULE",
        "ZONE",
        "STATE",
    ]
    order = [name for line in lines[1:] for name in ("soon", "later", "paused-one") if name in line]
    assert order == ["soon", "later", "paused-one"]
    assert "Every 5 minutes" in text
    assert "CET" in text or "CEST" in text
    assert "paused: vendor down" in text
    data = as_json("list")
    assert [j["name"] for j in data["jobs"]] == ["soon", "later", "paused-one"]
    first = data["jobs"][0]
    assert first["last_status"] == "failed"
    assert first["state"] == "enabled"
    assert first["next_run"].endswith("Z")
    assert first["schedule"] == "*/5 * * * *"
    assert data["jobs"][2]["next_run"] is None
    assert data["jobs"][2]["pause_note"] == "vendor down"
    assert [j["name"] for j in as_json("list", "--failing")["jobs"]] == ["soon"]
    assert [j["name"] for j in as_json("list", "--paused")["jobs"]] == ["paused-one"]
    assert [j["name"] for j in as_json("list", "--search", "LAT")["jobs"]] == ["later"]
    assert later.pk in [j["id"] for j in as_json("list")["jobs"]]


def test_list_late_finds_a_job_whose_next_run_passed_unrecorded():
    late = make_job("late", enabled=True)
    JobDefinition.objects.filter(pk=late.pk).update(
        next_run_at=timezone.now() - timedelta(minutes=10)
    )
    make_job("on-time", enabled=True)
    assert [j["name"] for j in as_json("list", "--late")["jobs"]] == ["late"]


def test_describe_shows_schedule_policies_next_and_last_runs_and_alerts():
    job = make_job("report", enabled=True, cron="30 2 * * *", timezone="Europe/Paris")
    JobDefinition.objects.filter(pk=job.pk).update(consecutive_failures=2)
    run = make_run(job, status=RunStatus.FAILED)
    JobRun.objects.filter(pk=run.pk).update(error="ValueError: bad input\nTraceback…")
    text, _ = cron("describe", "report")
    assert "At 02:30" in text
    assert "zone Europe/Paris" in text
    assert text.count("CET") + text.count("CEST") >= 10
    assert f"{run.pk:>8}" in text
    assert "ValueError: bad input" in text
    assert "2 failure(s) in a row" in text
    data = as_json("describe", str(job.pk))
    assert data["job"]["name"] == "report"
    assert data["job"]["cron"] == "30 2 * * *"
    assert len(data["next"]) == 10
    assert data["runs"][0]["status"] == "failed"
    assert data["alerts"][0].startswith("2 failure(s) in a row")


def test_next_previews_a_job_or_an_expression_and_refuses_a_bad_one_as_the_admin_does():
    make_job("nightly", cron="0 1 * * *", timezone="UTC")
    data = as_json("next", "nightly", "--count", "3")
    assert [t["due"][11:] for t in data["fire_times"]] == ["01:00:00Z"] * 3
    window = as_json("next", "--expr", "0 */6 * * *", "--between", "2030-01-01", "2030-01-02")
    assert [t["due"] for t in window["fire_times"]] == [
        "2030-01-01T00:00:00Z",
        "2030-01-01T06:00:00Z",
        "2030-01-01T12:00:00Z",
        "2030-01-01T18:00:00Z",
        "2030-01-02T00:00:00Z",
    ]
    # Through a DST change: the note says so.
    text, _ = cron(
        "next",
        "--expr",
        "30 2 * * *",
        "--tz",
        "Europe/Paris",
        "--between",
        "2031-03-29",
        "2031-03-31",
    )
    assert "DST" in text or "clocks" in text or "skipped" in text.lower(), text
    relative = as_json("next", "--expr", "@every 90m", "--between", "now", "now+3h")
    assert len(relative["fire_times"]) == 2
    bad = refused("next", "--expr", "61 * * * *")
    assert "minute field: '61'" in str(bad)
    assert "0-59" in str(bad)
    assert "is not a time zone" in str(refused("next", "--expr", "* * * * *", "--tz", "Mars/Base"))
    assert "is not a time" in str(refused("next", "--expr", "* * * * *", "--between", "x", "y"))


def test_runs_lists_newest_first_with_filters():
    job = make_job("runner")
    failed = make_run(job, status=RunStatus.FAILED)
    ok = make_run(job, status=RunStatus.SUCCESS)
    data = as_json("runs", "runner")
    assert [r["id"] for r in data["runs"]] == [failed.pk, ok.pk]  # newer slot first
    assert [r["id"] for r in as_json("runs", "--status", "success")["runs"]] == [ok.pk]
    assert "is not a run status" in str(refused("runs", "--status", "done"))
    assert "No job named 'nobody'" in str(refused("runs", "nobody"))


def test_trigger_records_a_manual_run_under_the_actor(settings):
    job = make_job("now-please", task="tests.add", args=[1, 2])
    data = as_json("trigger", "now-please", "--by", "alice@laptop")
    run = JobRun.objects.get(pk=data["run"]["id"])
    assert run.trigger == "manual"
    assert run.job_id == job.pk
    entry = JobChange.objects.filter(job=job, action="run_now").get()
    assert (entry.actor, entry.via) == ("alice@laptop", "cli")


def test_pause_and_resume_with_the_note_and_the_default_actor():
    job = make_job("pausable", enabled=True)
    text, _ = cron("pause", "pausable", "--note", "vendor API down")
    assert text.strip() == "Paused pausable: vendor API down"
    job.refresh_from_db()
    assert (job.enabled, job.pause_note) == (False, "vendor API down")
    entry = JobChange.objects.filter(job=job).latest("pk")
    assert entry.via == "cli"
    assert "@" in entry.actor
    assert as_json("resume", "pausable")["changed"] is True
    assert as_json("resume", "pausable")["changed"] is False
    job.refresh_from_db()
    assert job.enabled
    assert job.pause_note == ""


def test_retry_a_failed_run_and_refuse_one_that_did_not_fail():
    job = make_job("retrying", task="tests.add", args=[1, 2])
    failed = make_run(job, status=RunStatus.FAILED)
    data = as_json("retry", str(failed.pk), "--by", "bob")
    assert data["runs"][0]["attempt"] == 2
    assert JobChange.objects.filter(job=job, action="retry", actor="bob").exists()
    ok = make_run(job, status=RunStatus.SUCCESS)
    assert "not failed: only failed runs retry" in str(refused("retry", str(ok.pk)))
    assert "no one is at a terminal" in str(refused("retry", "--job", "retrying", "--failed"))


def test_cancel_needs_yes_without_a_terminal_and_cancels_a_waiting_run(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    job = make_job("cancelling")
    run = make_run(job, status=RunStatus.QUEUED)
    assert "add --yes" in str(refused("cancel", str(run.pk)))
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.QUEUED
    text, _ = cron("cancel", str(run.pk), "--yes", "--reason", "wrong input", "--by", "carol")
    assert f"Run {run.pk} is cancelled" in text
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    assert JobChange.objects.filter(job=job, action="cancel", actor="carol").exists()
    again = refused("cancel", str(run.pk), "--yes")
    assert "only a waiting or running run can be cancelled" in str(again)


def test_set_changes_only_the_fields_given_and_checks_the_version():
    job = make_job("patched", task="tests.echo", args=[1, 2], kwargs={"region": "eu"})
    JobDefinition.objects.filter(pk=job.pk).update(description="keep me")
    job.refresh_from_db()
    before = {f: getattr(job, f) for f in ("task", "args", "kwargs", "description", "timezone")}
    version = as_json("describe", "patched")["version"]
    dry = as_json("set", "patched", "--schedule", "15 4 * * *", "--dry-run")
    assert dry["changes"] == {"cron": ["0 0 1 1 *", "15 4 * * *"]}
    assert JobDefinition.objects.get(pk=job.pk).cron == "0 0 1 1 *"
    done = as_json(
        "set", "patched", "--schedule", "15 4 * * *", "--if-version", version, "--by", "dan"
    )
    assert done["changes"] == {"cron": ["0 0 1 1 *", "15 4 * * *"]}
    job.refresh_from_db()
    assert job.cron == "15 4 * * *"
    assert {f: getattr(job, f) for f in before} == before
    entry = JobChange.objects.filter(job=job).latest("pk")
    assert (entry.actor, entry.via, set(entry.changes)) == ("dan", "cli", {"cron"})
    stale = refused("set", "patched", "--jitter", "5", "--if-version", version)
    assert "changed since version" in str(stale)
    assert JobDefinition.objects.get(pk=job.pk).jitter == 0
    as_json("set", "patched", "--kwargs", '{"region": "us"}', "--field", "max_runs=10")
    job.refresh_from_db()
    assert (job.kwargs, job.max_runs) == ({"region": "us"}, 10)


def test_set_refuses_with_the_admins_messages_and_a_job_declared_in_code():
    make_job("strict")
    bad = refused("set", "strict", "--schedule", "61 * * * *")
    assert str(bad).startswith("cron: minute field: '61'")
    zone = refused("set", "strict", "--tz", "Mars/Base")
    assert str(zone) == "timezone: Unknown time zone 'Mars/Base': not in the IANA database."
    assert "Not valid JSON" in str(refused("set", "strict", "--kwargs", "{region"))
    assert "is not a field of a job's definition" in str(refused("set", "strict", "--field", "x=1"))
    coded = make_job("coded")
    JobDefinition.objects.filter(pk=coded.pk).update(source="code", code_origin="app/jobs.py:12")
    refusal = refused("set", "coded", "--jitter", "3")
    assert str(refusal) == "Defined in code at app/jobs.py:12: change it there and run sync_jobs."


def test_backfill_dry_run_then_makes_the_missing_slots_and_reprocesses_failed(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    job = make_job("hourly", task="tests.add", args=[1, 2], cron="0 * * * *")
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    start, end = now - timedelta(hours=5), now - timedelta(hours=1)
    failed = JobRun.objects.create(
        job=job,
        scheduled_for=start + timedelta(hours=2),
        task_id=job.task_id_for(start + timedelta(hours=2)),
        status=RunStatus.FAILED,
    )
    window = ("--from", start.isoformat(), "--to", end.isoformat())
    plan = as_json("backfill", "hourly", *window, "--reprocess", "failed", "--dry-run")
    assert len(plan["slots"]) == 3
    assert [r["id"] for r in plan["again"]] == [failed.pk]
    assert JobRun.objects.filter(job=job).count() == 1
    assert "add --yes" in str(refused("backfill", "hourly", *window))
    made = as_json("backfill", "hourly", *window, "--reprocess", "failed", "--yes")
    assert len(made["runs"]) == 4
    failed.refresh_from_db()
    assert failed.attempt == 2
    assert failed.pk in [r["id"] for r in made["runs"]]
    assert JobRun.objects.filter(job=job).count() == 4
    wrong = refused("backfill", "hourly", "--from", "soon", "--to", "now", "--dry-run")
    assert "--from 'soon' is not a time" in str(wrong)


def test_export_then_import_reproduces_the_jobs_exactly(tmp_path):
    make_job(
        "exported",
        task="tests.echo",
        args=[1, 2],
        kwargs={"x": 1},
        cron="30 2 * * 1-5",
        timezone="Europe/Paris",
        exclusions=["2026-12-25"],
        jitter=7,
        max_retries=2,
        retention={"success": 7},
        enabled=True,
    )
    paused = make_job("paused-export")
    paused.pause("on hold")
    path = tmp_path / "jobs.json"
    path.write_text(cron("export")[0])
    first = json.loads(path.read_text())
    assert [j["name"] for j in first["jobs"]] == ["exported", "paused-export"]
    assert as_json("import", str(path), "--dry-run")["jobs"] == [
        {"name": "exported", "action": "keep", "changes": {}},
        {"name": "paused-export", "action": "keep", "changes": {}},
    ]
    JobDefinition.objects.all().delete()
    assert "add --yes" in str(refused("import", str(path)))
    as_json("import", str(path), "--yes", "--by", "erin")
    assert json.loads(cron("export")[0]) == first
    assert JobChange.objects.filter(actor="erin", via="cli", action="created").count() == 2
    # A bad job refuses the whole file, each fault named.
    broken = json.loads(path.read_text())
    broken["jobs"][0]["cron"] = "61 * * * *"
    broken["jobs"][1]["colour"] = "blue"
    path.write_text(json.dumps(broken))
    refusal = str(refused("import", str(path), "--yes"))
    assert refusal.startswith("Nothing imported:")
    assert "job 'exported', cron: minute field: '61'" in refusal
    assert "job 'paused-export': 'colour' is not a field of a job" in refusal
    assert JobDefinition.objects.get(name="exported").cron == "30 2 * * 1-5"


def test_export_as_yaml_imports_back_and_without_pyyaml_names_the_extra(tmp_path, monkeypatch):
    import yaml

    make_job("yaml-job", task="tests.echo", args=[1, "b"], cron="*/10 * * * *", timezone="Japan")
    text = cron("export", "--format", "yaml")[0]
    assert yaml.safe_load(text) == json.loads(cron("export")[0])
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    JobDefinition.objects.filter(name="yaml-job").update(cron="0 * * * *")
    planned = cron("import", str(path), "--dry-run")[0]
    assert planned.startswith("Would update yaml-job:")
    assert "0 to create, 1 to update, 0 unchanged (dry run: nothing saved)." in planned
    data = as_json("import", str(path), "--yes")
    assert data["jobs"] == [
        {"name": "yaml-job", "action": "update", "changes": {"cron": ["0 * * * *", "*/10 * * * *"]}}
    ]
    assert JobDefinition.objects.get(name="yaml-job").cron == "*/10 * * * *"
    assert cron("import", str(path), "--yes")[0] == "0 created, 0 updated, 1 unchanged.\n"
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if PyYAML were not installed
    refusal = str(refused("export", "--format", "yaml"))
    assert "pip install 'django-cluster-cron[yaml]'" in refusal
    assert "--format json" in refusal


def test_trigger_kwargs_go_to_this_run_alone_over_the_jobs(settings):
    from tests.support.jobs import apply

    job = make_job("with-kwargs", task="tests.echo", kwargs={"region": "eu", "day": "any"})
    data = as_json("trigger", "with-kwargs", "--kwargs", '{"day": "2026-11-29"}')
    run = JobRun.objects.select_related("job").get(pk=data["run"]["id"])
    assert run.kwargs_override == {"day": "2026-11-29"}
    assert run.task_kwargs() == {"region": "eu", "day": "2026-11-29"}
    done = apply(run)
    assert done.status == RunStatus.SUCCESS
    assert "'day': '2026-11-29'" in done.result
    assert "'region': 'eu'" in done.result
    # The next run of the job has the job's own.
    assert JobDefinition.objects.get(pk=job.pk).kwargs == {"region": "eu", "day": "any"}
    make_job("strict-args", task="tests.add", args=[1, 2])
    wrong = refused("trigger", "strict-args", "--kwargs", '{"z": 1}')
    assert str(wrong) == "Task 'tests.add' takes (x, y); got an unexpected keyword argument 'z'."
    assert "must be a JSON object" in str(refused("trigger", "strict-args", "--kwargs", "[1]"))
    assert "--kwargs: Not valid JSON" in str(refused("trigger", "strict-args", "--kwargs", "{z"))
    assert JobRun.objects.filter(job__name="strict-args").count() == 0


def test_set_takes_a_moment_without_an_offset_in_the_jobs_zone():
    job = make_job("zoned", timezone="Europe/Paris")
    as_json("set", "zoned", "--start-at", "2031-01-05T09:00", "--end-at", "2031-06-01")
    job.refresh_from_db()
    assert job.start_at is not None
    assert job.end_at is not None
    assert job.start_at.isoformat() == "2031-01-05T08:00:00+00:00"  # 09:00 CET
    assert job.end_at.isoformat() == "2031-05-31T22:00:00+00:00"  # midnight CEST
    assert "--start-at 'soon' is not a time" in str(refused("set", "zoned", "--start-at", "soon"))


def test_next_of_a_job_shown_in_another_zone_keeps_the_jobs_schedule():
    make_job("paris-nine", cron="0 9 * * *", timezone="Europe/Paris")
    shown = as_json(
        "next", "paris-nine", "--between", "2031-01-05T00:00Z", "2031-01-05T23:59Z", "--tz", "UTC"
    )
    assert [t["due"] for t in shown["fire_times"]] == ["2031-01-05T08:00:00Z"]
    text, _ = cron("next", "paris-nine", "--count", "1", "--tz", "UTC")
    assert "08:00:00 UTC" in text


def test_usage_problems_exit_2():
    make_job("used")
    assert "Give a job, or an expression" in str(refused("next", code=2))
    assert "--count must be from 1" in str(refused("next", "used", "--count", "0", code=2))
    assert "Nothing to set" in str(refused("set", "used", code=2))
    assert "Give a run id" in str(refused("retry", code=2))


def test_describe_and_set_mask_secret_arguments_as_the_admin_does():
    make_job("secretive", task="tests.echo", kwargs={"api_token": "s3cr3t", "region": "eu"})
    described = as_json("describe", "secretive")
    assert "s3cr3t" not in json.dumps(described)
    assert described["job"]["kwargs"]["region"] == "eu"
    text, _ = cron("set", "secretive", "--kwargs", '{"api_token": "n3w", "region": "us"}')
    assert "s3cr3t" not in text
    assert "n3w" not in text
    assert JobDefinition.objects.get(name="secretive").kwargs["api_token"] == "n3w"
    wrong = refused("set", "secretive", "--kwargs", "{region")
    assert str(wrong).startswith("--kwargs: Not valid JSON: expecting property name")


def test_import_refuses_values_of_the_wrong_type_by_job_and_a_file_that_is_not_text(tmp_path):
    make_job("typed")
    spec = json.loads(cron("export", "typed")[0])
    spec["jobs"][0]["catchup_window"] = 3600
    spec["jobs"][0]["start_at"] = 5
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(spec))
    refusal = str(refused("import", str(path), "--yes"))
    assert refusal.startswith("Nothing imported:")
    assert "job 'typed'" in refusal
    binary = tmp_path / "jobs.bin"
    binary.write_bytes(b"\xff\xfe\x00")
    assert "not UTF-8 text" in str(refused("import", str(binary), "--yes"))


def test_a_rerun_clears_how_the_run_had_ended_a_cancel_included():
    from django_cluster_cron.ledger import statements, transitions

    job = make_job("rerunnable", task="tests.add", args=[1, 2])
    run = make_run(job, status=RunStatus.CANCELLED)
    JobRun.objects.filter(pk=run.pk).update(
        cancel_requested_at=timezone.now(), cancel_requested_by="alice", error="stopped"
    )
    assert transitions.rerun(JobRun.objects.get(pk=run.pk))
    again = JobRun.objects.get(pk=run.pk)
    assert (again.status, again.attempt, again.error) == (RunStatus.PENDING, 2, "")
    assert again.cancel_requested_at is None
    claimed = statements.claim_run(again.pk, again.task_id, again.attempt, "here:1")
    assert claimed is not None
    claimed_run = JobRun.objects.select_related("job").get(pk=run.pk)
    assert transitions.succeeded(claimed_run, result="ok", duration=timedelta(seconds=1))


def test_import_updates_only_what_differs_and_refuses_a_job_declared_in_code(tmp_path):
    make_job("kept-as-is", task="tests.add", args=[1, 2])
    changed = make_job("to-change", task="tests.add", args=[1, 2], jitter=0)
    path = tmp_path / "jobs.json"
    spec = json.loads(cron("export")[0])
    for job in spec["jobs"]:
        if job["name"] == "to-change":
            job["jitter"] = 9
    path.write_text(json.dumps(spec))
    plan = {j["name"]: j for j in as_json("import", str(path), "--dry-run")["jobs"]}
    assert plan["kept-as-is"]["action"] == "keep"
    assert plan["to-change"] == {
        "name": "to-change",
        "action": "update",
        "changes": {"jitter": [0, 9]},
    }
    assert JobDefinition.objects.get(pk=changed.pk).jitter == 0
    as_json("import", str(path), "--yes")
    assert JobDefinition.objects.get(pk=changed.pk).jitter == 9
    JobDefinition.objects.filter(pk=changed.pk).update(source="code", code_origin="app/jobs.py:3")
    for job in spec["jobs"]:
        if job["name"] == "to-change":
            job["jitter"] = 1
    path.write_text(json.dumps(spec))
    refusal = str(refused("import", str(path), "--yes"))
    assert "job 'to-change': Defined in code at app/jobs.py:3: change it there" in refusal
