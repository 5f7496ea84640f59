"""The ledger says what ran: no finished status for a body that did not run to completion.

A job may not schedule the app's own task; malformed and forged messages leave the row as it was;
a body that raised Celery's Ignore or Reject, called ``self.retry()`` or ``sys.exit``, or was
ended by a signal is recorded as what happened. These cases go through Celery's ``apply``; a soft
time limit and the messages Celery discards need real prefork worker processes:
tests/cluster/test_ledger_truth_workers.py.
"""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from django_cluster_cron import signals
from django_cluster_cron.celery_app import registered_task_names
from django_cluster_cron.ledger.fence import Fence
from django_cluster_cron.models import JobDefinition, JobRun, RunStatus
from django_cluster_cron.scheduler.recording import Recorder
from django_cluster_cron.tasks import execute_run
from django_cluster_cron.worker.celery import CalledDirectly
from tests.support.jobs import apply, make_job, make_run
from tests.testapp.celery import app
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def unchanged(run: JobRun) -> bool:
    fresh = JobRun.objects.get(pk=run.pk)
    return (fresh.status, fresh.started_at, fresh.finished_at, fresh.worker, fresh.attempt) == (
        run.status,
        run.started_at,
        run.finished_at,
        run.worker,
        run.attempt,
    )


# -- the app's own tasks are not a job's task ---------------------------------------------------


def test_the_task_choices_offer_neither_celerys_nor_the_apps_own_tasks():
    names = registered_task_names(app)
    assert "tests.add" in names
    assert not [n for n in names if n.startswith(("celery.", "django_cluster_cron."))]


def test_a_job_row_that_names_the_apps_own_task_is_parked_by_the_scheduler():
    job = JobDefinition(
        name="names-our-task", cron="* * * * * *", timezone="UTC", task="tests.add", args=[1, 2]
    )
    job.full_clean()
    job.save()
    JobDefinition.objects.filter(pk=job.pk).update(task="django_cluster_cron.execute_run")
    job.refresh_from_db()
    assert "django-cluster-cron's own tasks" in (job.runtime_problem() or "")
    fence = Fence.claim("node", "token")
    batch = Recorder().schedule_due(
        now=timezone.now() + timedelta(seconds=2), fence=fence, node_id="node", limit=10
    )
    assert [job_id for job_id, _ in batch.invalid] == [job.pk]
    assert not JobRun.objects.filter(job=job).exists()


def test_a_run_of_a_job_that_names_the_apps_own_task_fails_and_never_says_success():
    """The reported defect: every such run was recorded 'success' while nothing ran."""
    job = make_job()
    JobDefinition.objects.filter(pk=job.pk).update(task="django_cluster_cron.execute_run")
    run = apply(make_run(job))
    assert run.status == RunStatus.FAILED
    assert "django-cluster-cron's own tasks" in run.error


def test_execute_run_called_as_a_function_raises_instead_of_returning():
    with pytest.raises(CalledDirectly, match="cannot be called as a function"):
        execute_run(1, 1)


# -- messages that are not the scheduler's leave the row as it was ------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("1", 1), {}),
        ((None, 1), {}),
        ((1.0, 1), {}),
        ((True, 1), {}),
        ((-1, 1), {}),
        ((2**63, 1), {}),
        (("RUN", "1"), {}),
        (("RUN", 0), {}),
        (("RUN", 1, "extra"), {}),
        (("RUN", 1), {"surprise": True}),
        ((), {}),
    ],
)
def test_a_malformed_message_leaves_the_run_as_it_was(args, kwargs, caplog):
    job = make_job(args=["malformed"])
    run = make_run(job)
    args = tuple(run.pk if a == "RUN" else a for a in args)
    execute_run.apply(args=args, kwargs=kwargs, task_id=run.task_id)
    assert unchanged(run)
    assert not Execution.objects.filter(label="malformed").exists()
    assert "run.rejected_message" in caplog.text


# -- bodies that did not complete -----------------------------------------------------------------


@pytest.fixture
def received():
    events = []

    def receiver(signal, sender, run, **extra):
        events.append(signal)

    hooked = [signals.run_succeeded, signals.run_failed, signals.run_retrying, signals.run_skipped]
    for s in hooked:
        s.connect(receiver, weak=False)
    yield events
    for s in hooked:
        s.disconnect(receiver)


def test_a_body_that_raised_ignore_is_skipped_not_succeeded_and_not_retried(received):
    run = apply(make_run(make_job(task="tests.ignore", max_retries=3)))
    assert run.status == RunStatus.SKIPPED
    assert run.reason == "the task raised Ignore: nothing to do this time"
    assert run.attempt == 1
    assert run.finished_at is not None
    assert received == [signals.run_skipped]


def test_a_body_that_rejected_its_work_fails_without_retries(received):
    run = apply(make_run(make_job(task="tests.reject", max_retries=3)))
    assert run.status == RunStatus.FAILED
    assert run.attempt == 1
    assert "Reject" in run.error
    assert received == [signals.run_failed]


def test_a_reject_that_asks_to_be_requeued_is_retried_by_the_jobs_policy(received):
    job = make_job(task="tests.reject", kwargs={"requeue": True}, max_retries=2, retry_backoff=60)
    run = apply(make_run(job))
    assert run.status == RunStatus.RETRYING
    assert run.attempt == 2
    assert received == [signals.run_retrying]


def test_a_body_that_called_self_retry_is_retrying_under_the_jobs_policy(received):
    job = make_job(task="tests.retry_self", max_retries=1, retry_backoff=60)
    run = apply(make_run(job))
    assert run.status == RunStatus.RETRYING
    assert "try again later" in run.error
    run = apply(run, attempt=2)
    assert run.status == RunStatus.FAILED
    assert received == [signals.run_retrying, signals.run_failed]


def test_a_body_that_called_sys_exit_failed_and_the_exit_goes_on(received):
    run = make_run(make_job(task="tests.exit", args=[3]))
    with pytest.raises(SystemExit):
        apply(run)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "SystemExit: 3" in run.error
    assert received == [signals.run_failed]


@pytest.fixture
def billiard_terminate_handler():
    """SIGTERM handled as in a Celery prefork pool process: billiard's handler raises
    SystemExit in whatever runs. Restored afterwards, flag included."""
    from billiard import common

    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, common._shutdown_cleanup)  # type: ignore[attr-defined]
    yield
    signal.signal(signal.SIGTERM, previous)
    common._should_have_exited[0] = False  # type: ignore[attr-defined]


def test_a_body_ended_by_a_terminate_signal_is_left_running_for_the_revoke_or_the_sweep(
    billiard_terminate_handler, caplog
):
    # The process is being terminated (a revoke with terminate=True, a cold shutdown): the
    # body neither finished nor failed. The worker's main process records the revoke as
    # cancelled; otherwise the leader's lost-run sweep applies the job's on_worker_lost. A
    # "failed" written here raced the cancel and sometimes won (seen in CI).
    run = make_run(make_job(task="tests.signal_self"))
    with pytest.raises(SystemExit):
        apply(run)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert run.error == ""
    assert run.finished_at is None
    assert any("run.interrupted" in record.getMessage() for record in caplog.records)


# -- the task allowlist holds at run time too ---------------------------------------------------


def test_a_job_whose_task_left_the_allowlist_is_parked_and_its_queued_run_fails(settings):
    """Saved while its task was allowed; the list narrowed since (a deploy): the scheduler parks
    the job and a worker refuses a run already queued, both saying why."""
    job = JobDefinition(
        name="left-the-list", cron="* * * * * *", timezone="UTC", task="tests.record", args=["x"]
    )
    job.full_clean()
    job.save()
    queued = make_run(job)
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "TASK_ALLOWLIST": ["billing.*"]}
    assert "not in CLUSTER_CRON['TASK_ALLOWLIST']" in (job.runtime_problem() or "")
    fence = Fence.claim("node", "token")
    batch = Recorder().schedule_due(
        now=timezone.now() + timedelta(seconds=2), fence=fence, node_id="node", limit=10
    )
    assert [job_id for job_id, _ in batch.invalid] == [job.pk]
    assert JobRun.objects.filter(job=job).count() == 1  # only the run queued before
    run = apply(queued)
    assert run.status == RunStatus.FAILED
    assert "TASK_ALLOWLIST" in run.error
    assert not Execution.objects.filter(label="x").exists()


def test_a_parked_job_comes_back_once_its_task_is_allowed_again(settings):
    """A deploy that widens the allowlist brings parked jobs back at the next term, owing slots
    from then on; jobs still refused, paused or finished stay as they are."""
    jobs = {}
    for name, extra in (("billing", {}), ("other", {}), ("paused", {}), ("done", {"max_runs": 1})):
        job = JobDefinition(
            name=name, cron="* * * * * *", timezone="UTC", task="tests.record", args=[name], **extra
        )
        job.full_clean()
        job.save()
        jobs[name] = job
    jobs["other"].task = "tests.echo"
    jobs["other"].save()
    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "TASK_ALLOWLIST": ["billing.*"]}
    fence = Fence.claim("node", "token")
    batch = Recorder().schedule_due(
        now=timezone.now() + timedelta(seconds=2), fence=fence, node_id="node", limit=10
    )
    assert len(batch.invalid) == 4
    jobs["paused"].refresh_from_db()
    jobs["paused"].pause()
    JobDefinition.objects.filter(pk=jobs["done"].pk).update(scheduled_runs=1)
    assert not JobDefinition.objects.filter(next_run_at__isnull=False).exists()

    settings.CLUSTER_CRON = {**settings.CLUSTER_CRON, "TASK_ALLOWLIST": ["tests.record"]}
    now = timezone.now()
    assert Recorder().return_parked(now) == [jobs["billing"].pk]
    back = JobDefinition.objects.get(pk=jobs["billing"].pk)
    assert back.last_scheduled_at == now
    assert back.next_run_at is not None
    assert back.next_run_at > now
    for name in ("other", "paused", "done"):
        assert JobDefinition.objects.get(pk=jobs[name].pk).next_run_at is None, name
    assert Recorder().return_parked(now) == []  # once back, nothing more to do
