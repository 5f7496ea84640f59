"""Bring the database in line with the jobs declared in code.

The plan, per job: **create** a declared job that has no row; **update** a code-owned row whose
declared fields changed (a new schedule restarts it from now, as an admin edit does); **disable**
a code-owned row whose declaration is gone (not deleted: its ledger stays; a note says why), and
**enable** it again if the declaration comes back; leave rows that match alone. A job made in the
admin with a declared job's name is a **conflict**: reported, left alone (rename one of them).
Operators keep pausing and resuming declared jobs: sync never touches ``enabled`` except for
jobs it disabled itself.

A row is taken for removed only when what declared it was read and no longer declares it: the
running settings set ``CLUSTER_CRON["JOBS"]`` (``{}`` included) for a job declared there, the
module named by its origin was imported (or is gone) for an ``@cron`` one. Otherwise it is
**kept** as it is, with why (logged as ``sync.kept``): a settings module without ``JOBS`` (one
written for a single command, ``migrate`` say) would otherwise disable every job declared in the
project's settings.

A declaration that is invalid or cannot be read is **left out** (``invalid``, logged as
``declared.invalid``) and the others are synced. Its row, if an earlier release synced it, stays
exactly as last synced: not updated, not disabled, so a typo in a deploy stops no job that ran
before it. Its name still counts as declared: the job is not taken for one removed from code.

Many hosts may sync at once (``migrate`` in several release jobs, ``sync_jobs`` by hand): the
sync takes the ``JobSync`` row's lock first, so they run one after another; and with
``CLUSTER_CRON["JOBS_VERSION"]`` set, a release older than the last one applied is skipped, so
during a rolling deploy an old host cannot undo what a new one synced.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from .. import audit
from ..conf import app_settings
from ..dbtime import database_now
from ..models import JobDefinition, JobSync
from . import CODE_FIELDS, Declaration, Declared, Rejected, collect

logger = logging.getLogger("django_cluster_cron.sync")

REMOVED_NOTE = "removed from code"


@dataclass
class Change:
    # create, update, disable, enable, unchanged, conflict, invalid; kept: not declared here, but
    # not disabled either (what declared it was not read: settings without JOBS, say)
    action: str
    name: str
    origin: str = ""
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    reason: str = ""

    def line(self) -> str:
        text = f"{self.action:<9} {self.name}"
        if self.fields:
            text += ": " + ", ".join(
                f"{k} {old!r} -> {new!r}" for k, (old, new) in sorted(self.fields.items())
            )
        if self.reason:
            text += f" ({self.reason})"
        return text


@dataclass
class SyncResult:
    changes: list[Change]
    applied: bool
    skipped: str = ""

    def count(self, action: str) -> int:
        return sum(1 for change in self.changes if change.action == action)


def plan(declared: Declared) -> list[Change]:
    """What a sync would do, from the declarations and the rows as they are now."""
    by_name = {d.name: d for d in declared.valid}
    left_out = declared.left_out()
    rows = {job.name: job for job in JobDefinition.objects.filter(name__in=[*by_name, *left_out])}
    changes = [_left_out(rejected, rows.get(rejected.name)) for rejected in declared.rejected]
    for declaration in declared.valid:
        row = rows.get(declaration.name)
        if row is None:
            changes.append(Change("create", declaration.name, declaration.origin))
        elif row.source != "code":
            changes.append(
                Change(
                    "conflict",
                    declaration.name,
                    declaration.origin,
                    reason="a job with this name was made in the admin; rename one of them",
                )
            )
        else:
            wanted = declaration.job()
            diff = {
                name: (getattr(row, name), getattr(wanted, name))
                for name in CODE_FIELDS
                if getattr(row, name) != getattr(wanted, name)
            }
            if row.code_origin != declaration.origin:
                diff["code_origin"] = (row.code_origin, declaration.origin)
            if not row.enabled and row.pause_note.startswith(REMOVED_NOTE):
                changes.append(Change("enable", declaration.name, declaration.origin, diff))
            elif diff:
                changes.append(Change("update", declaration.name, declaration.origin, diff))
            else:
                changes.append(Change("unchanged", declaration.name, declaration.origin))
    gone = JobDefinition.objects.filter(source="code", enabled=True).exclude(
        name__in=[*by_name, *left_out]
    )
    for job in gone.order_by("name"):
        # Disabled only if what declared it was read here and no longer declares it.
        unknown = declared.unknown_reason(job.code_origin)
        action = "kept" if unknown else "disable"
        changes.append(Change(action, job.name, job.code_origin, reason=unknown))
    return changes


def _left_out(rejected: Rejected, row: JobDefinition | None) -> Change:
    """The line of a declaration left out: what is wrong, where, and what became of its job."""
    if row is None:
        outcome = "no job created"
    elif row.source == "code":
        outcome = "the job keeps its last synced definition"
    else:
        outcome = "the job made in the admin with this name is left alone"
    reason = f"{rejected.text()} Declared at {rejected.origin}. Left out: {outcome}."
    return Change("invalid", rejected.name, rejected.origin, reason=reason)


def sync(*, dry_run: bool = False, by: str = "sync_jobs", log_each: bool = True) -> SyncResult:
    """Plan, and unless ``dry_run`` apply, in one transaction that holds the sync lock.

    ``log_each``: log each declaration left out and each job kept (``declared.invalid``,
    ``sync.kept``); a caller that prints every change itself (``sync_jobs``) turns it off, so
    that each is said once."""
    declared = collect()
    version = app_settings.JOBS_VERSION
    digest = _digest(declared.valid)
    with transaction.atomic():
        state = _locked_state()
        if version is not None and state.version is not None and version < state.version:
            reason = f"this code declares version {version}, the database has {state.version}"
            logger.warning("sync.skipped_older by=%s %s", by, reason)
            return SyncResult(plan(declared), applied=False, skipped=reason)
        changes = plan(declared)
        if dry_run:
            transaction.set_rollback(True)
            return SyncResult(changes, applied=False)
        with audit.acting("code sync", via="code", note=f"version {version}" if version else ""):
            for change in changes:
                _apply(change, {d.name: d for d in declared.valid})
        state.version = version if version is not None else state.version
        state.digest = digest
        state.synced_at = database_now()
        state.synced_by = by[:255]
        state.save()
    result = SyncResult(changes, applied=True)
    for change in changes if log_each else ():
        if change.action == "invalid":
            logger.warning("declared.invalid job=%s by=%s %s", change.name, by, change.reason)
        elif change.action == "kept":
            logger.warning("sync.kept job=%s by=%s %s", change.name, by, change.reason)
    changed = any(change.action != "unchanged" for change in changes)
    logger.log(
        logging.INFO if changed else logging.DEBUG,
        "sync.done by=%s version=%s created=%s updated=%s disabled=%s enabled=%s conflicts=%s "
        "invalid=%s kept=%s",
        by,
        version,
        result.count("create"),
        result.count("update"),
        result.count("disable"),
        result.count("enable"),
        result.count("conflict"),
        result.count("invalid"),
        result.count("kept"),
    )
    return result


def _locked_state() -> JobSync:
    """The sync row, locked for this transaction. Its first statement is a write, so a second
    sync waits for the first on every database (SQLite included, where a read that later
    upgrades to a write would fail with "database is locked" instead of waiting)."""
    if not JobSync.objects.filter(name="jobs").update(name="jobs"):
        with transaction.atomic():  # a savepoint: another sync may create it at the same time
            JobSync.objects.get_or_create(name="jobs")
        JobSync.objects.filter(name="jobs").update(name="jobs")
    state: JobSync = JobSync.objects.get(name="jobs")
    return state


def _digest(declared: Sequence[Declaration]) -> str:
    import hashlib

    return hashlib.sha256("".join(d.digest() for d in declared).encode()).hexdigest()


def _apply(change: Change, declared: dict[str, Declaration]) -> None:
    if change.action == "create":
        job = declared[change.name].job()
        job.source, job.code_origin = "code", change.origin
        job.save()
    elif change.action in ("update", "enable"):
        job = JobDefinition.objects.get(name=change.name)
        wanted = declared[change.name].job()
        for name in CODE_FIELDS:
            setattr(job, name, getattr(wanted, name))
        job.code_origin = change.origin
        if change.action == "enable":
            job.enabled, job.pause_note = True, ""
        job.save()
    elif change.action == "disable":
        job = JobDefinition.objects.get(name=change.name)
        job.enabled = False
        job.pause_note = f"{REMOVED_NOTE} ({database_now():%Y-%m-%d %H:%M} UTC)"
        job.save()
