"""Pruning the ledger: each job's finished runs go once past their status's period, the newest
``keep_last`` of each status stay however old, and each day is summed up before the first of its
runs goes.

One pass (:func:`prune`) takes at most ``limit`` runs, oldest slots first, status by status and
policy by policy (the jobs with no retention of their own share one statement per status): when
the leader prunes, in short transactions under its fence (a chunk of ids each: a deposed leader's
pass writes nothing more, and a tick never waits for more than one chunk), in one plain
transaction when an operator does (``prune_runs``). Before deleting, every (job, day) the batch
touches gets its :class:`~django_cluster_cron.models.RunSummary` from all of that day's runs
still in the ledger, if it has none; a day summed up already gains the runs recorded after its
summary (a backfill of an old range) as they go.
Runs waiting or running are never pruned. Deletes name their rows by id, and a run's pieces go
with it; no delete signal is sent.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, cast

from django.db import models, transaction
from django.db.models import DateTimeField, F, OuterRef, Q, Subquery, Value

from ..conf import app_settings
from ..core.retention import FINAL, Retention
from ..models import JobDefinition, JobPiece, JobRun, RunSummary
from ..models.bulk import AnyOf, MomentText, moment_reader, prefix_range, uncompiled
from ..models.retention import retention_policy
from .fence import Fence
from .summaries import day_of, sum_up

logger = logging.getLogger("django_cluster_cron.scheduler")

__all__ = ["Group", "Oldest", "Pruned", "groups", "oldest_prunable", "prune"]

# Ids per DELETE statement (and per IN list): small enough for every database's limits.
CHUNK = 2000
ARCHIVED_FIELDS = [f.attname for f in JobRun._meta.concrete_fields]


@dataclass(frozen=True)
class Group:
    """The runs of one final status that one policy governs: those of ``jobs`` (None: every
    job but ``others``, the jobs with a retention of their own), older than ``days`` (None: kept
    for ever), beyond the newest ``keep`` of their job."""

    status: str
    days: int | None
    keep: int
    jobs: tuple[int, ...] | None = None
    others: tuple[int, ...] = ()

    def runs(self, now: datetime) -> models.QuerySet[JobRun]:
        """This group's runs that may go at ``now`` (none for a status kept for ever), oldest
        slots first."""
        runs = self.past(now)
        if self.keep:
            # The job's keep-th newest run of this status: older ones may go (a job with fewer
            # keeps them all: the comparison with NULL holds for none).
            runs = runs.annotate(kept_from=Subquery(self._kept_from(OuterRef("job_id")))).filter(
                scheduled_for__lt=F("kept_from")
            )
        return runs

    def past(self, now: datetime, since: datetime | None = None) -> models.QuerySet[JobRun]:
        """This group's runs past their period at ``now`` (and slotted from ``since`` on), the
        newest ``keep`` of each job included, oldest slots first."""
        if self.days is None:
            return cast("models.QuerySet[JobRun]", JobRun.objects.none())
        # One range of the (status, slot) index, read in its order: given a bare slot < cutoff
        # or the status matched, PostgreSQL read the slot index and stepped over every run
        # kept longer (a failure's 90 days: 150,000 runs at 5 M, 110 ms a pass, against 8 ms).
        field = DateTimeField()
        runs = JobRun.objects.filter(
            prefix_range(
                "status",
                self.status,
                "scheduled_for",
                Value(now - timedelta(days=self.days), output_field=field),
                None if since is None else Value(since, output_field=field),
            )
        ).order_by("status", "scheduled_for")
        if self.jobs is not None:
            runs = runs.filter(job_id__in=self.jobs)
        elif self.others:
            runs = runs.exclude(job_id__in=self.others)
        return cast("models.QuerySet[JobRun]", runs)

    def choose(self, now: datetime, limit: int) -> list[tuple[int, int, str, date, datetime]]:
        """Up to ``limit`` of :meth:`runs`, oldest slots first: (id, job, status, slot's UTC day,
        created).

        Read in windows of the runs past their period, each job's keep-th newest slot looked up
        once (and only for the jobs a window holds) and compared here: asked of the database,
        that slot is looked up again for every run (10,000 index probes a pass of 10,000
        where a thousand jobs share it). A window whose runs are kept (a monthly job's newest,
        months old, lead the index for ever) is followed by the next, from its last slot on."""
        read = moment_reader()
        kept_from: dict[int, datetime | None] = {}
        chosen: list[tuple[int, int, str, date, datetime]] = []
        since: datetime | None = None
        at_since: list[int] = []  # the ids read already of the last window's last slot
        while len(chosen) < limit:
            want = limit - len(chosen)
            window = self.past(now, since)
            if since is not None:
                window = window.exclude(AnyOf("id", at_since))
            query = (
                window
                # The moments as text: they read far faster as such.
                .annotate(
                    slot=MomentText("scheduled_for"), created=MomentText("created_at")
                ).values_list("pk", "job_id", "status", "slot", "created")[:want]
            )
            with uncompiled():  # costed past PostgreSQL's JIT threshold, not worth compiling
                rows = [
                    (pk, job, status, cast(datetime, read(slot)), cast(datetime, read(made)))
                    for pk, job, status, slot, made in query
                ]
            if self.keep:
                self._look_up(sorted({row[1] for row in rows} - kept_from.keys()), kept_from)
            for pk, job, status, slot, created in rows:
                if self.keep:
                    bound = kept_from.get(job)
                    if bound is None or slot >= bound:
                        continue  # among the job's newest keep of this status
                chosen.append((pk, job, status, day_of(slot), created))
            if len(rows) < want:
                break  # none left past its period
            last = rows[-1][3]
            at_since = [row[0] for row in rows if row[3] == last] + (
                at_since if last == since else []
            )
            since = last
        return chosen

    def _kept_from(self, job: OuterRef) -> models.QuerySet[JobRun]:
        """The slot of ``job``'s keep-th newest run of this status."""
        newest = JobRun.objects.filter(job_id=job, status=self.status).order_by("-scheduled_for")
        return cast(
            "models.QuerySet[JobRun]", newest.values("scheduled_for")[self.keep - 1 : self.keep]
        )

    def _look_up(self, jobs: Sequence[int], into: dict[int, datetime | None]) -> None:
        """Each of ``jobs``' keep-th newest slot of this status (None: fewer runs than that)."""
        for start in range(0, len(jobs), CHUNK):
            part = jobs[start : start + CHUNK]
            found = (
                JobDefinition.all_objects.filter(AnyOf("id", part))
                .annotate(kept_from=Subquery(self._kept_from(OuterRef("pk"))))
                .values_list("pk", "kept_from")
            )
            into.update(dict.fromkeys(part))
            into.update(found)


def groups(*, days: int | None = None, keep_last: int | None = None) -> list[Group]:
    """The groups of the ledger's finished runs, one per status and distinct policy. ``days``
    and ``keep_last`` (an operator's ``prune_runs --days/--keep-last``) replace every job's
    periods and counts."""
    default = retention_policy()
    if days is not None:
        default = Retention(dict.fromkeys(FINAL, days), default.keep_last)
    if keep_last is not None:
        default = Retention(default.days, dict.fromkeys(FINAL, keep_last))
    own: dict[tuple[str, int | None, int], list[int]] = defaultdict(list)
    others: list[int] = []
    if days is None or keep_last is None:
        overriding = JobDefinition.all_objects.filter(
            Q(retention__isnull=False) | Q(keep_last__isnull=False)
        ).values_list("pk", "retention", "keep_last")
        for pk, job_days, job_keep in overriding:
            if not job_days and job_keep is None:
                continue  # an empty object: the project's
            others.append(pk)
            try:
                policy = retention_policy(
                    job_days if days is None else None, job_keep if keep_last is None else None
                )
            except ValueError as exc:  # a row saved around validation: its runs are kept
                logger.warning("prune.bad_retention job=%s error=%s", pk, exc)
                continue
            for status in FINAL:
                period = policy.days[status] if days is None else days
                kept = policy.keep(status) if keep_last is None else keep_last
                own[(status, period, kept)].append(pk)
    found = [
        Group(status, default.days[status], default.keep(status), None, tuple(others))
        for status in FINAL
    ]
    found.extend(
        Group(status, period, kept, tuple(jobs)) for (status, period, kept), jobs in own.items()
    )
    return [group for group in found if group.days is not None]


@dataclass
class Pruned:
    """What one pass (or a command's passes) deleted, per status, and the summaries it wrote."""

    by_status: Counter[str] = field(default_factory=Counter)
    summaries: int = 0
    summaries_dropped: int = 0
    full: bool = False  # the pass took as many runs as it could: more may be waiting

    @property
    def runs(self) -> int:
        return sum(self.by_status.values())

    def add(self, other: Pruned) -> None:
        self.by_status.update(other.by_status)
        self.summaries += other.summaries
        self.summaries_dropped += other.summaries_dropped
        self.full = other.full


def prune(
    *,
    now: datetime,
    limit: int,
    fence: Fence | None = None,
    days: int | None = None,
    keep_last: int | None = None,
    archive: Callable[[list[dict[str, Any]]], None] | None = None,
    before_write: Callable[[], object] | None = None,
) -> Pruned:
    """One pass: up to ``limit`` runs that may go at ``now`` (see the module), their days summed
    up first. ``archive`` gets each run's columns before it goes; ``before_write`` is called
    before each of the leader's fenced writes (it waits while the tick records).

    The leader's pass (``fence`` given) writes in short fenced transactions, one per statement's
    worth (a chunk of ids, a group of job-days): a fenced transaction holds the leader row's lock
    until it commits, and the tick's own fenced writes wait for it, so a pass in one transaction
    held the ticks back for its whole length. Each step raises ``FencedOut`` and writes nothing
    once the term is over. An operator's pass (``prune_runs``, no fence) is one transaction: a
    failed batch leaves nothing half done."""
    found = groups(days=days, keep_last=keep_last)
    pruned = Pruned()
    step = steps(fence, now, before_write)
    whole: AbstractContextManager[Any] = transaction.atomic() if fence is None else nullcontext()
    with whole:
        if before_write is not None:  # choosing reads the ledger hard too: not during a burst
            before_write()
        batch: list[tuple[int, int, str, date, datetime]] = []
        for group in found:
            left = limit - len(batch)
            if left <= 0:
                break
            batch.extend(group.choose(now, left))
        pruned.full = len(batch) >= limit
        if batch:
            pruned.summaries = sum_up(batch, now=now, step=step)
            by_status: dict[str, list[int]] = defaultdict(list)
            for row in batch:
                by_status[row[2]].append(row[0])
            for status, ids in by_status.items():
                for chunk in _chunks(ids):
                    with step():
                        if archive is not None:
                            archive(
                                list(
                                    JobRun.objects.filter(AnyOf("id", chunk)).values(
                                        *ARCHIVED_FIELDS
                                    )
                                )
                            )
                        pruned.by_status[status] += _delete(chunk, status)
        with step():
            pruned.summaries_dropped = _drop_old_summaries(now, limit)
    return pruned


def steps(
    fence: Fence | None, now: datetime, before: Callable[[], object] | None = None
) -> Callable[[], AbstractContextManager[Any]]:
    """What each write of a pass runs in: a fenced transaction of its own for the leader (after
    ``before``), the operator's one transaction otherwise."""
    if fence is None:
        return nullcontext

    @contextmanager
    def step() -> Iterator[None]:
        if before is not None:
            before()
        with fence.transaction(now):
            yield

    return step


def _delete(ids: Sequence[int], status: str) -> int:
    """Delete these runs, by id and without loading them, with their pieces first; only those
    still of ``status`` (a run an operator retried meanwhile is no longer final)."""
    pieces = JobPiece.objects.filter(AnyOf("run_id", ids), run__status=status)
    pieces._raw_delete(pieces.db)
    runs = JobRun.objects.filter(AnyOf("id", ids), status=status)
    return int(runs._raw_delete(runs.db))


def _drop_old_summaries(now: datetime, limit: int) -> int:
    before = now.date() - timedelta(days=app_settings.SUMMARY_RETENTION_DAYS)
    ids = list(
        RunSummary.objects.filter(day__lt=before)
        .order_by("day")
        .values_list("pk", flat=True)[:limit]
    )
    for chunk in _chunks(ids):
        RunSummary.objects.filter(AnyOf("id", chunk))._raw_delete(RunSummary.objects.db)
    return len(ids)


def _chunks(ids: Sequence[int]) -> Iterable[Sequence[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


# -- how far behind -------------------------------------------------------------------------


@dataclass(frozen=True)
class Oldest:
    """The oldest run that may go and has not: its slot and its status's period."""

    slot: datetime
    days: int


def oldest_prunable(now: datetime) -> Oldest | None:
    """The oldest run past its retention still in the ledger (one indexed look per group)."""
    found: Oldest | None = None
    for group in groups():
        slot = group.runs(now).values_list("scheduled_for", flat=True)
        first = slot.first()
        if first is not None and group.days is not None and (found is None or first < found.slot):
            found = Oldest(first, group.days)
    return found
