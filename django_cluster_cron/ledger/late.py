"""Runs recorded for their slot that nobody sent at their time, judged where they are found late.

A leader records a job's next run ahead of its instant (``LOOKAHEAD``); on a backend that can
defer, the run is on its backend already, waiting for its due time. If every scheduler stops
around that instant, nobody sends it (or records it sent) at its time: a later leader finds it
among the runs never published (taking over, or in the outbox sweep), and a worker may receive
the deferred message late. Either way the run is judged by its job's catch-up policy, exactly as
a slot that was never recorded would be (:func:`~django_cluster_cron.core.catchup.judge_unsent`):
``none`` records it ``missed``, ``latest`` keeps it only if no later slot is due by now, ``all``
sends it as a ``catchup`` run; past the catch-up window it is ``missed`` whatever the policy.

Only a slot's run (trigger ``schedule`` or ``catchup``) that no leader recorded as sent
(``publish_count`` 0) is judged: a run a leader sent on time and that waits in a backlog was
vouched for at its instant; an operator's run (``manual``, ``backfill``) has no instant to miss.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction

from ..conf import app_settings
from ..core.catchup import LateVerdict, judge_unsent
from ..core.errors import ScheduleError
from ..models import (
    SCHEDULED_TRIGGERS,
    JobDefinition,
    JobRun,
    RunStatus,
    RunTrigger,
    catchup_limits,
)
from .fence import Fence
from .outbox import OutboxMessage
from .rows import catchup_rule

SLOT_TRIGGERS = frozenset(str(trigger) for trigger in SCHEDULED_TRIGGERS)


def may_be_late(trigger: str, publish_count: int, due: datetime, now: datetime) -> bool:
    """Whether a run is one to judge (see the module): a slot's run never recorded as sent,
    past the on-time grace. Cheap: no query, no schedule."""
    return (
        publish_count == 0 and trigger in SLOT_TRIGGERS and now - due > app_settings.ON_TIME_GRACE
    )


def verdict_for(job: JobDefinition, slot: datetime, due: datetime, now: datetime) -> LateVerdict:
    """The job's catch-up policy on its run for ``slot``, found unsent at ``now``. A job whose
    row cannot be planned (bad data) keeps its run as it is: the worker reports the problem."""
    try:
        rules, schedule, timing = job.catchup_rules(catchup_limits()), job.schedule, job.timing()
    except (ScheduleError, ValueError):
        return LateVerdict.ON_TIME
    return judge_unsent(schedule, slot=slot, due=due, now=now, rules=rules, timing=timing)


def missed_because(verdict: LateVerdict, job: JobDefinition, late: timedelta) -> str:
    """Why a run found late is recorded ``missed``, in the ledger's words."""
    found = f"not sent at its time (found {late.total_seconds():.0f} s late)"
    if verdict is LateVerdict.MISSED_WINDOW:
        return f"{found}; outside the job's catch-up window ({job.catchup_window})"
    return f"{found}; {catchup_rule(job.catchup_policy)}"


@dataclass
class Settled:
    """What :func:`settle_unsent` decided: the messages still to send (a caught-up run's
    trigger is ``catchup``) and how many it recorded missed or turned into catch-up runs."""

    send: list[OutboxMessage] = field(default_factory=list)
    missed: int = 0
    caught_up: int = 0
    missed_by_job: Counter[str] = field(default_factory=Counter)  # job name -> runs missed


def settle_unsent(
    messages: Sequence[OutboxMessage], *, now: datetime, fence: Fence | None = None
) -> Settled:
    """Judge the runs among ``messages`` that were never sent and are late (a leader taking
    over its predecessor's runs, or its outbox sweep): record the missed ones ``missed`` and
    the caught-up ones ``catchup``, each only if it is still unsent and unclaimed (a deferred
    message a worker took meanwhile is the worker's to judge). Under ``fence``: a leader's
    write."""
    late = [m for m in messages if may_be_late(m.trigger, m.publish_count, m.due, now)]
    if not late:
        return Settled(send=list(messages))
    jobs = JobDefinition.all_objects.in_bulk({m.job_id for m in late})
    missed: dict[tuple[str, str], list[int]] = {}
    caught_up: list[int] = []
    for message in late:
        job = jobs.get(message.job_id)
        if job is None:
            continue
        verdict = verdict_for(job, message.scheduled_for, message.due, now)
        if verdict in (LateVerdict.MISSED_POLICY, LateVerdict.MISSED_WINDOW):
            reason = missed_because(verdict, job, now - message.due)
            missed.setdefault((reason, job.name), []).append(message.run_id)
        elif verdict is LateVerdict.CATCH_UP and message.trigger != str(RunTrigger.CATCHUP):
            caught_up.append(message.run_id)
    unsent = JobRun.objects.filter(status=RunStatus.PENDING, publish_count=0)
    by_job: Counter[str] = Counter()
    with fence.transaction(now) if fence is not None else transaction.atomic():
        for (reason, name), run_ids in missed.items():
            by_job[name] += unsent.filter(pk__in=run_ids).update(
                status=RunStatus.MISSED, reason=reason[:255]
            )
        if caught_up:
            unsent.filter(pk__in=caught_up).update(trigger=RunTrigger.CATCHUP)
    dropped = {run_id for run_ids in missed.values() for run_id in run_ids}
    again = set(caught_up)
    send = [
        dataclasses.replace(m, trigger=str(RunTrigger.CATCHUP)) if m.run_id in again else m
        for m in messages
        if m.run_id not in dropped
    ]
    return Settled(send=send, missed=len(dropped), caught_up=len(again), missed_by_job=by_job)


def judge_claimed(run: JobRun) -> str:
    """A worker's judgment of the run it just claimed (its ``started_at`` is the database's
    now): why it is missed, or "" when it runs — recorded ``catchup`` here if it runs late."""
    due = run.due_at or run.scheduled_for
    now = run.started_at
    if now is None or not may_be_late(run.trigger, run.publish_count, due, now):
        return ""
    verdict = verdict_for(run.job, run.scheduled_for, due, now)
    if verdict in (LateVerdict.MISSED_POLICY, LateVerdict.MISSED_WINDOW):
        return missed_because(verdict, run.job, now - due)
    if verdict is LateVerdict.CATCH_UP and run.trigger != str(RunTrigger.CATCHUP):
        JobRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING, attempt=run.attempt).update(
            trigger=RunTrigger.CATCHUP
        )
        run.trigger = str(RunTrigger.CATCHUP)
    return ""
