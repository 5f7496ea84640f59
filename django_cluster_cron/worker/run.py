"""One run on a worker, whatever delivered it: take → carry out → record → end.

1. **Take** — the claim (:mod:`.claim`): exactly one delivery of a run's message wins it; every
   other copy is counted as a duplicate and runs nothing.
2. **Carry out** — guard, then call the job's task in this process: a job definition no longer
   valid fails; a slot no leader sent at its time goes by its job's catch-up policy (``missed``
   without running, or run as ``catchup``: :func:`django_cluster_cron.ledger.late.
   judge_claimed`); the overlap policy may refuse it (:mod:`.overlap`); then the body runs with
   :func:`current_run` set while the heartbeat stamps the row (:mod:`.heartbeat`).
3. **Record** — how it ended, in the ledger (:mod:`.record`), before anything else sees it.
4. **End as the system expects** — the execution system's module turns the outcome into what its
   tools show: :mod:`.celery` (SUCCESS, RETRY, FAILURE, ignored) and :mod:`.djtasks` (the
   backend's result, or its failure).

What an execution system gives a run is a :class:`Delivery`: how its next attempt is sent, the
trace its message carried, whether the process is being ended, and how the system's own
exceptions read as outcomes (its exception ladder).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from .. import signals
from ..leases.lock import LockUnavailable
from ..ledger.late import judge_claimed
from ..models import JobRun, RunCancelled
from ..ops import metrics, tracing
from ..wire import RunRef
from .claim import EarlyMessage, claim, count_duplicate, new_token, through_switchover
from .current import running_as
from .heartbeat import call_beating
from .outcome import Delivery, Ending, Outcome, RunTimer, failure
from .overlap import SkipRun, overlap_gate, release_next, release_quietly
from .pieces import split_run
from .record import record

logger = logging.getLogger("django_cluster_cron.worker")


def take(ref: RunRef, result_id: str = "", pool: str = "") -> JobRun | None:
    """Claim the run for this delivery; None (logged and counted) if another copy has it.
    ``result_id``: the execution backend's own id of this attempt's result, kept on the run;
    ``pool``: how this worker runs tasks (a Celery pool's name, or ``django.tasks``)."""
    claiming = time.perf_counter()
    token = new_token()
    try:
        run = through_switchover(
            lambda retried: claim(
                ref.run_id, ref.task_id, ref.attempt, result_id, token, retried, pool
            )
        )
    except EarlyMessage:
        return None
    if run is None:
        count_duplicate(ref.run_id, ref.task_id)
        return None
    found = metrics.get()
    found.claim.observe(time.perf_counter() - claiming)
    found.run_outcome("claimed").inc()
    return run


def carry_out(
    delivery: Delivery, run: JobRun, call: Callable[[], Any]
) -> tuple[Outcome, str | None]:
    """Guard and run a claimed run's body (``call``), record how it ended; return the outcome
    and the status written (None if nothing was: the run was declared lost meanwhile)."""
    with tracing.executing(run, delivery.traceparent) as span:
        timer = RunTimer(run.started_at or timezone.now())
        try:
            outcome = _guarded(delivery, run, call)
        except Exception as exc:
            # Escaped before the body ran (e.g. the soft time limit while waiting for the
            # overlap lock): the run failed; it did not succeed.
            outcome = failure(exc)
        except BaseException as exc:
            if delivery.terminating():
                # A signal is ending this process (a Celery revoke with terminate=True, a cold
                # shutdown, a db_worker forced to stop): the body did not finish and did not
                # fail. Write nothing: Celery's main process records a terminating revoke as
                # cancelled, and any other end is a lost run for the leader's heartbeat sweep
                # (the job's on_worker_lost). Recording "failed" here would race the cancel
                # and could win.
                logger.warning(
                    "run.interrupted run=%s attempt=%s: the process is terminating",
                    run.pk,
                    run.attempt,
                )
                raise
            # The body itself raised SystemExit or KeyboardInterrupt: its run failed.
            record(delivery, run, timer, failure(exc))
            raise
        status = record(delivery, run, timer, outcome)
        span.ended(status, outcome.error, outcome.reason)
    release_next(delivery, run, status, timer.now())
    return outcome, status


def _guarded(delivery: Delivery, run: JobRun, call: Callable[[], Any]) -> Outcome:
    """Guard, then call the job's task; say how it ended. Writes only the trigger of a run that
    no leader sent at its time and that its catch-up policy runs late."""
    job = run.job
    problem = job.runtime_problem()
    if problem is not None:
        logger.error("run.invalid_job run=%s job=%s: %s", run.pk, job.pk, problem)
        return Outcome(Ending.FINAL, reason=f"invalid job definition: {problem}")
    missed = judge_claimed(run)
    if missed:
        return Outcome(Ending.MISSED, reason=missed, not_run="catchup_window")
    try:
        gate = overlap_gate(job)
    except SkipRun as refusal:
        return Outcome(Ending.SKIPPED, reason=str(refusal), not_run="overlap")
    except LockUnavailable as exc:
        return Outcome(Ending.FAILURE, error=exc, trace=f"overlap lock unavailable: {exc}")
    signals.send(signals.run_started, run)
    try:
        if job.has_pieces:  # its pieces run the body, on whichever workers take them
            return split_run(delivery, run)
        with running_as(run):
            result = call_beating(run, call, interrupts=job.cancel_interrupts)
    except RunCancelled as exc:
        return failure(exc, Ending.CANCELLED)
    except Exception as exc:
        return delivery.judge(exc) or failure(exc)
    finally:
        if gate is not None:
            release_quietly(gate)
    return Outcome(Ending.SUCCESS, result=result)
