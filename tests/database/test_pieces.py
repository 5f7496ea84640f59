"""One slot split into pieces, in this process: each piece delivered as a worker would (Celery's
``apply`` with the run's headers), the ledger the real one.

* the split: a run of a job with pieces records its pieces and sends them, within the parallel
  cap; the body runs once per piece with ``current_run().piece``; the planner's keys;
* the run's status from its pieces under each failed-piece cap and success policy, and the
  completion task, exactly once, with the summary;
* a piece's retries, a silent worker's piece retried by the leader, a message sent again,
  an operator's retry of one failed piece that re-opens the run;
* bad piece settings refused on their field.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError

from django_cluster_cron.ledger import piece_moves, piece_runs, pieces
from django_cluster_cron.ledger.fence import Fence
from django_cluster_cron.models import JobDefinition, JobPiece, JobRun, PieceStatus, RunStatus
from django_cluster_cron.testing import run_due
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

UTC = timezone.utc
SLOT = datetime(2026, 11, 24, 3, tzinfo=UTC)
AFTER = SLOT + timedelta(seconds=1)


@pytest.fixture(autouse=True)
def _memory_lease(settings):
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "LEASE_BACKEND": "memory"}


def split_job(name="split", **fields):
    fields.setdefault("task", "tests.piece")
    fields.setdefault("args", [name])
    job = JobDefinition(name=name, cron="0 3 * * *", timezone="UTC", **fields)
    job.full_clean()
    job.save()
    JobDefinition.objects.filter(pk=job.pk).update(
        last_scheduled_at=SLOT - timedelta(hours=15), next_run_at=SLOT
    )
    job.refresh_from_db()
    return job


def executed(label):
    return Counter(
        e.label.split(":")[2] for e in Execution.objects.filter(label__startswith=f"{label}:")
    )


def piece_states(run):
    return dict(
        JobPiece.objects.filter(run=run, index__gte=0).values_list("index", "status").order_by()
    )


def deliver_pieces():
    """Deliver every piece message sent and not taken, here, as a worker would (and what their
    ends release), until none is left."""
    from django_cluster_cron.celery_app import get_celery_app
    from django_cluster_cron.worker.celery import deliver_here

    delivered = set()
    while True:
        sent = JobPiece.objects.filter(status=PieceStatus.QUEUED).select_related("run__job")
        fresh = [p for p in sent.order_by("run_id", "index") if (p.pk, p.attempt) not in delivered]
        if not fresh:
            return
        for piece in fresh:
            delivered.add((piece.pk, piece.attempt))
            deliver_here(get_celery_app(), pieces.piece_message(piece.run, piece))


def completions():
    return [e.label for e in Execution.objects.filter(label__startswith="complete:")]


def test_a_run_is_split_and_each_piece_runs_once_then_the_run_succeeds():
    split_job(pieces=5, on_complete="tests.completed")
    [run] = run_due(AFTER)
    assert run.status == RunStatus.SUCCESS
    assert run.piece_count == 5
    assert run.result == "5/5 done"
    assert executed("split") == Counter({str(i): 1 for i in range(5)})
    assert set(piece_states(run).values()) == {PieceStatus.SUCCESS}
    # The task ids derive from the run's; the completion message ran once, with the summary.
    ids = sorted(JobPiece.objects.filter(run=run).values_list("task_id", flat=True))
    assert ids == sorted([f"{run.task_id}.{i}" for i in range(5)] + [f"{run.task_id}.done"])
    assert completions() == [f"complete:{run.pk}:success:success=5"]
    # Settling again (the leader's backstop) closes nothing twice.
    assert piece_runs.settle(run.pk).closed is None
    assert len(completions()) == 1


def test_the_parallel_cap_sends_pieces_a_few_at_a_time():
    job = split_job(pieces=6, max_parallel_pieces=2)
    [run] = run_due(AFTER, execute=False)
    # The run's own message, delivered: the split sends two pieces, the four others wait.
    from tests.support.jobs import apply_own_task

    apply_own_task(run)
    states = Counter(piece_states(run).values())
    assert states == Counter({PieceStatus.QUEUED: 2, PieceStatus.PENDING: 4})
    # Each piece's end releases the next; the run ends with all six done.
    deliver_pieces()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCESS, run.result
    assert executed("split") == Counter({str(i): 1 for i in range(6)})
    assert job.runs.count() == 1


def test_a_planner_decides_the_pieces_and_each_body_reads_its_key():
    split_job(pieces_planner="tests.plan")
    [run] = run_due(AFTER)
    assert run.status == RunStatus.SUCCESS
    keys = sorted(
        e.label.split(":", 3)[3] for e in Execution.objects.filter(label__startswith="split:")
    )
    assert keys == ["match-13", "match-3", "match-5", "match-8"]
    assert list(
        JobPiece.objects.filter(run=run).order_by("index").values_list("key", flat=True)
    ) == ["match-3", "match-5", "match-8", "match-13"]


def test_the_first_failed_piece_fails_the_run_and_cancels_the_pieces_not_started():
    split_job(pieces=4, max_parallel_pieces=1, kwargs={"fail": [1]}, on_complete="tests.completed")
    [run] = run_due(AFTER)
    assert run.status == RunStatus.FAILED
    assert piece_states(run) == {
        0: PieceStatus.SUCCESS,
        1: PieceStatus.FAILED,
        2: PieceStatus.CANCELLED,
        3: PieceStatus.CANCELLED,
    }
    assert "piece 1: RuntimeError: piece 1 fails by request" in run.error
    assert run.result == "1/4 done, 1 failed, 2 cancelled"
    assert executed("split") == Counter({"0": 1, "1": 1})
    assert completions() == [f"complete:{run.pk}:failed:cancelled=2,failed=1,success=1"]


def test_failures_within_max_failed_pieces_let_the_run_succeed():
    split_job(pieces=4, max_failed_pieces=2, kwargs={"fail": [0, 3]})
    [run] = run_due(AFTER)
    assert run.status == RunStatus.SUCCESS
    assert run.result == "2/4 done, 2 failed"
    assert executed("split") == Counter({str(i): 1 for i in range(4)})


def test_at_least_k_succeeds_once_k_pieces_have():
    split_job(pieces=5, max_parallel_pieces=1, pieces_success="at_least", pieces_success_count=2)
    [run] = run_due(AFTER)
    assert run.status == RunStatus.SUCCESS
    assert Counter(piece_states(run).values()) == Counter(
        {PieceStatus.SUCCESS: 2, PieceStatus.CANCELLED: 3}
    )


def test_required_indexes_decide_the_run():
    split_job(
        pieces=4,
        max_failed_pieces=3,
        pieces_success="required",
        pieces_required=[0, 2],
        kwargs={"fail": [2]},
    )
    [run] = run_due(AFTER)
    assert run.status == RunStatus.FAILED
    assert piece_states(run)[2] == PieceStatus.FAILED


def test_a_failing_piece_is_retried_alone_by_the_jobs_retry_policy():
    split_job(pieces=3, kwargs={"fail": [1]}, max_retries=1, retry_backoff=0)
    [run] = run_due(AFTER)
    piece = JobPiece.objects.get(run=run, index=1)
    # Its next attempt is sent (as the run's retries are): here it is delivered again.
    assert (piece.status, piece.attempt) == (PieceStatus.RETRYING, 2)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    message = pieces.piece_message(run, piece)
    from django_cluster_cron.celery_app import get_celery_app
    from django_cluster_cron.worker.celery import deliver_here

    JobPiece.objects.filter(pk=piece.pk).update(retry_at=None)
    deliver_here(get_celery_app(), message)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert executed("split") == Counter({"0": 1, "1": 2, "2": 1})


def test_an_operator_retries_one_failed_piece_and_the_run_completes():
    job = split_job(pieces=3, kwargs={"fail": [2]}, on_complete="tests.completed")
    [run] = run_due(AFTER)
    assert run.status == RunStatus.FAILED
    # The piece's cause is fixed; the operator sends piece 2 again.
    JobDefinition.objects.filter(pk=job.pk).update(kwargs={})
    assert piece_moves.retry_pieces(run, [2]) == 1
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    settled = piece_runs.settle(run.pk)
    assert [p.index for p in settled.send] == [2]
    deliver_pieces()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCESS, run.result
    assert executed("split") == Counter({"0": 1, "1": 1, "2": 2})
    # The completion message went once per close: failed, then success (its attempt 2).
    assert completions() == [
        f"complete:{run.pk}:failed:failed=1,success=2",
        f"complete:{run.pk}:success:success=3",
    ]


def test_a_silent_pieces_worker_is_lost_and_its_piece_goes_again(settings):
    split_job(pieces=2, max_retries=1)
    [run] = run_due(AFTER, execute=False)
    from tests.support.jobs import apply_own_task

    apply_own_task(run)
    piece = JobPiece.objects.get(run=run, index=0)
    claimed = piece_moves.claim_piece(run.pk, 0, piece.task_id, 1, "gone:1", "token", "prefork")
    assert claimed is not None
    # Its worker died: no heartbeat for longer than the lost wait.
    JobPiece.objects.filter(pk=piece.pk).update(heartbeat_at=AFTER - timedelta(hours=1))
    fence = Fence.claim("test-node", "test-node:token")
    from django_cluster_cron.dbtime import database_now

    lost = piece_moves.lost_pieces(
        now=database_now(), lost_after=timedelta(seconds=30), fence=fence, limit=10
    )
    assert [(p.index, p.status, p.attempt) for p in lost] == [(0, PieceStatus.RETRYING, 2)]
    # Sent again (its next attempt) and taken by another worker: the run completes.
    JobPiece.objects.filter(pk=piece.pk).update(status=PieceStatus.QUEUED, retry_at=None)
    deliver_pieces()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCESS
    assert executed("split") == Counter({"0": 1, "1": 1})


def test_a_copy_of_a_pieces_message_loses_the_claim():
    split_job(pieces=1)
    [run] = run_due(AFTER)
    piece = JobPiece.objects.get(run=run, index=0)
    from django_cluster_cron.celery_app import get_celery_app
    from django_cluster_cron.worker.celery import deliver_here

    result = deliver_here(get_celery_app(), pieces.piece_message(run, piece))
    assert result.state == "IGNORED"
    assert executed("split") == Counter({"0": 1})


def test_a_stale_piece_is_sent_again_by_the_leader():
    split_job(pieces=2)
    [run] = run_due(AFTER, execute=False)
    from tests.support.jobs import apply_own_task

    apply_own_task(run)
    JobPiece.objects.filter(run=run).update(republish_at=AFTER - timedelta(hours=1))
    fence = Fence.claim("test-node", "test-node:token")
    from django_cluster_cron.dbtime import database_now

    again = pieces.stale(now=database_now(), fence=fence, limit=10)
    assert sorted(m.piece or 0 for m in again) == [0, 1]
    assert set(JobPiece.objects.filter(run=run).values_list("publish_count", flat=True)) == {2}


def test_current_run_outside_a_piece_has_no_piece():
    split_job(name="plain", task="tests.record", args=["plain"])
    [run] = run_due(AFTER)
    assert run.status == RunStatus.SUCCESS
    assert JobRun.objects.get(pk=run.pk).piece is None


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"pieces": 0}, "pieces", "greater than or equal to 1"),
        ({"pieces": 10_001}, "pieces", "less than or equal to 10000"),
        ({"pieces": 3, "pieces_planner": "tests.plan"}, "pieces_planner", "not both"),
        ({"pieces_planner": "no.such.planner"}, "pieces_planner", "no.such.planner"),
        ({"pieces": 3, "max_failed_pieces": 3}, "max_failed_pieces", "at most 2"),
        ({"max_parallel_pieces": 2}, "max_parallel_pieces", "Only a job with pieces"),
        ({"pieces": 3, "pieces_success": "at_least"}, "pieces_success_count", "how many"),
        (
            {"pieces": 3, "pieces_success": "at_least", "pieces_success_count": 4},
            "pieces_success_count",
            "cannot succeed out of 3",
        ),
        (
            {"pieces": 3, "pieces_success": "required", "pieces_required": [0, 3]},
            "pieces_required",
            "Index 3 is not a piece",
        ),
        ({"pieces": 3, "on_complete": "no.such.task"}, "on_complete", "no.such.task"),
        ({"pieces": 3, "overlap_policy": "terminate_other"}, "overlap_policy", "cancel_other"),
    ],
)
def test_bad_piece_settings_are_refused_on_their_field(fields, field, says):
    job = JobDefinition(name="bad", cron="0 3 * * *", task="tests.piece", args=["x"], **fields)
    with pytest.raises(ValidationError) as found:
        job.full_clean()
    errors = found.value.message_dict
    assert field in errors, errors
    assert any(says in message for message in errors[field]), errors[field]


def test_a_cancel_of_a_run_with_pieces_cancels_those_not_started_and_closes_it():
    from django_cluster_cron import actions
    from tests.support.jobs import apply_own_task

    split_job(pieces=4, on_complete="tests.completed")
    [run] = run_due(AFTER, execute=False)
    apply_own_task(run)
    # Piece 0 is running on some worker; the others are sent, not started.
    piece = JobPiece.objects.get(run=run, index=0)
    assert piece_moves.claim_piece(run.pk, 0, piece.task_id, 1, "w:1", "t", "prefork")
    run = actions.cancel(JobRun.objects.get(pk=run.pk), by="alice")
    assert run.status == RunStatus.RUNNING  # piece 0 still runs: asked to stop
    states = piece_states(run)
    assert states == {
        0: PieceStatus.RUNNING,
        1: PieceStatus.CANCELLED,
        2: PieceStatus.CANCELLED,
        3: PieceStatus.CANCELLED,
    }
    assert JobPiece.objects.get(run=run, index=0).cancel_requested_by == "alice"
    # Its body stops at the cancel: the run closes cancelled, its completion sent once.
    claimed = JobPiece.objects.select_related("run__job").get(run=run, index=0)
    assert piece_moves.finish_piece(claimed, PieceStatus.CANCELLED, {"error": "stopped"})
    settled = piece_runs.settle(run.pk)
    assert settled.closed == RunStatus.CANCELLED
    assert [p.index for p in settled.send] == [-1]


def test_prune_runs_deletes_a_run_with_its_pieces_and_counts_runs():
    import io

    from django.core.management import call_command

    split_job(pieces=5)
    [run] = run_due(AFTER)
    JobRun.objects.filter(pk=run.pk).update(scheduled_for=AFTER - timedelta(days=400))
    out = io.StringIO()
    call_command("prune_runs", "--days", "30", "--keep-last", "0", "--no-progress", stdout=out)
    assert "Deleted 1 runs" in out.getvalue()
    assert not JobPiece.objects.exists()


def test_the_api_lists_a_runs_pieces_and_retries_a_failed_one(admin_client):
    job = split_job(pieces=3, kwargs={"fail": [1]})
    [run] = run_due(AFTER)
    base = f"/cron/api/runs/{run.pk}/"
    shown = admin_client.get(base).json()
    assert (shown["piece_count"], shown["progress"]) == (3, "1/3 done, 1 failed, 1 cancelled")
    listed = admin_client.get(base + "pieces/").json()["pieces"]
    assert [p["index"] for p in listed] == [0, 1, 2]
    assert listed[1]["status"] == "failed"
    assert "fails by request" in listed[1]["error"]
    # A stray field, a bad index: refused on their field.
    refused = admin_client.post(
        base + "retry-pieces/", {"indexes": [-1]}, content_type="application/json"
    )
    assert refused.status_code == 400
    assert "indexes" in refused.json()
    JobDefinition.objects.filter(pk=job.pk).update(kwargs={})
    answer = admin_client.post(
        base + "retry-pieces/", {"indexes": [1]}, content_type="application/json"
    )
    assert answer.status_code == 200, answer.content
    assert answer.json()["status"] == "running"
    deliver_pieces()
    assert admin_client.get(base).json()["status"] == "success"
    # Nothing failed any more: a second retry is refused with the reason.
    again = admin_client.post(base + "retry-pieces/", {}, content_type="application/json")
    assert again.status_code == 400
    assert "no failed pieces" in again.json()["detail"]


def test_the_admin_shows_a_runs_pieces_and_retries_one(admin_client):
    job = split_job(pieces=3, max_failed_pieces=1, kwargs={"fail": [2]})
    [run] = run_due(AFTER)
    assert run.status == RunStatus.SUCCESS  # one failure is allowed
    page = admin_client.get(f"/admin/django_cluster_cron/jobrun/{run.pk}/change/").content.decode()
    assert "2/3 done, 1 failed" in page
    assert "piece 2 fails by request" in page
    retry = f"/admin/django_cluster_cron/jobrun/{run.pk}/retry-pieces/"
    assert f'formaction="{retry}"' in page
    JobDefinition.objects.filter(pk=job.pk).update(kwargs={})
    answer = admin_client.post(retry, {"index": "2"})
    assert answer.status_code == 302
    # The run (a success with one failure allowed) is re-opened for the piece, and closes again.
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
    deliver_pieces()
    assert executed("split")["2"] == 2
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.SUCCESS, "3/3 done")


def test_the_pieces_metrics_agree_with_the_ledger():
    from prometheus_client import REGISTRY

    def sample(outcome):
        labels = {"job_name": "metered", "outcome": outcome}
        return REGISTRY.get_sample_value("cluster_cron_pieces_total", labels) or 0.0

    before = {o: sample(o) for o in ("succeeded", "failed", "retried", "cancelled")}
    split_job(
        name="metered",
        pieces=6,
        max_parallel_pieces=2,
        max_retries=1,
        retry_backoff=0,
        kwargs={"fail": [3]},
    )
    [run] = run_due(AFTER)
    piece = JobPiece.objects.get(run=run, index=3)
    assert piece.status == PieceStatus.RETRYING  # its first attempt failed: retried
    JobPiece.objects.filter(pk=piece.pk).update(status=PieceStatus.QUEUED, retry_at=None)
    deliver_pieces()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    ledger = Counter(piece_states(run).values())
    counted = {o: sample(o) - before[o] for o in before}
    assert counted == {
        "succeeded": ledger[PieceStatus.SUCCESS],
        "failed": ledger[PieceStatus.FAILED],
        "cancelled": ledger[PieceStatus.CANCELLED],
        "retried": 1,
    }, (counted, ledger)


@pytest.mark.skipif(not settings.HAS_DJANGO_TASKS, reason="django-tasks-db is not installed")
def test_a_django_tasks_job_splits_and_completes_the_same_way():
    split_job(
        name="dtasks",
        task="tests.testapp.dtasks.piece",
        args=["dtasks"],
        pieces_planner="tests.testapp.dtasks.plan",
        on_complete="tests.testapp.dtasks.completed",
        kwargs={"fail": [1]},
        max_failed_pieces=1,
    )
    [run] = run_due(AFTER)
    assert run.status == RunStatus.SUCCESS
    assert run.result == "1/2 done, 1 failed"
    assert executed("dtasks") == Counter({"0": 1, "1": 1})
    assert completions() == [f"complete:{run.pk}:success:failed=1,success=1"]
    assert sorted(JobPiece.objects.filter(run=run, index__gte=0).values_list("key", flat=True)) == [
        "north",
        "south",
    ]


@pytest.mark.skipif(not settings.HAS_DJANGO_TASKS, reason="django-tasks-db is not installed")
def test_a_completion_task_of_the_other_system_is_refused():
    job = JobDefinition(
        name="mixed",
        cron="0 3 * * *",
        task="tests.piece",
        args=["x"],
        pieces=2,
        on_complete="tests.testapp.dtasks.completed",
    )
    with pytest.raises(ValidationError) as found:
        job.full_clean()
    assert "own execution system" in str(found.value.message_dict["on_complete"])


def test_the_piece_claim_is_one_conditional_update_on_the_piece_row():
    """Every condition of the claim is on the row it writes (a join would make Django write
    ``id IN (SELECT …)``, which two racing deliveries could both pass)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.support.jobs import apply_own_task

    split_job(pieces=1)
    [run] = run_due(AFTER, execute=False)
    apply_own_task(run)
    piece = JobPiece.objects.get(run=run, index=0)
    with CaptureQueriesContext(connection) as queries:
        assert piece_moves.claim_piece(run.pk, 0, piece.task_id, 1, "w:1", "t", "solo")
    [update] = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    table = JobPiece._meta.db_table
    assert f"{connection.ops.quote_name(table)}.{connection.ops.quote_name('status')} IN" in (
        update
    ), update
    assert "IN (SELECT" not in update.upper(), update
    assert not piece_moves.claim_piece(run.pk, 0, piece.task_id, 1, "w:2", "t2", "solo")
