"""The verbs that change job definitions: ``set`` (only the fields given), ``export`` and
``import`` (a round trip of definitions). Every value goes through the model's validation, the
one the admin's form and the API apply, so a refusal names the field and says what is wrong in
the same words; a job declared in code is changed in code (``sync_jobs``), not here."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from .. import audit
from ..models import DEFINITION_FIELDS, JobDefinition
from ..redaction import redact_changes
from .common import (
    STATE_FIELDS,
    Refused,
    Reply,
    Usage,
    find_job,
    job_data,
    json_option,
    parse_when,
    version_of,
    zone_or_utc,
)

# ``set``'s own options and the field each one sets (any other field: --field NAME=VALUE).
OPTION_FIELDS = {
    "schedule": "cron",
    "tz": "timezone",
    "task": "task",
    "args": "args",
    "kwargs": "kwargs",
    "description": "description",
    "jitter": "jitter",
    "overlap_policy": "overlap_policy",
    "catchup_policy": "catchup_policy",
    "max_retries": "max_retries",
    "queue": "queue",
    "start_at": "start_at",
    "end_at": "end_at",
}
FORMATS = ("json", "yaml")
# What import says it did with each job.
DONE = {"create": "created", "update": "updated"}
# The definition's moments: typed without an offset, they are in the job's zone.
MOMENTS = tuple(
    f.name for f in JobDefinition._meta.concrete_fields if isinstance(f, models.DateTimeField)
)


def _value(field_name: str, text: str, *, where: str, zone: tzinfo) -> Any:
    """An operator's text for a field: JSON for a JSON field (refused in the admin's words), a
    moment as the terminal takes one (without an offset: in ``zone``, the job's), else as typed
    (the model's validation converts and checks it)."""
    field = JobDefinition._meta.get_field(field_name)
    if text == "" and getattr(field, "null", False):
        return None
    if isinstance(field, models.JSONField):
        return json_option(text, field_name, where=where)
    if isinstance(field, models.DateTimeField):
        return parse_when(text, timezone.now(), zone, what=where)
    return text


def _refusal(exc: ValidationError, prefix: str = "") -> Refused:
    """The model's refusal as lines of ``field: message``, as the admin shows them."""
    if hasattr(exc, "error_dict"):
        lines = [
            f"{prefix}{name}: {message}"
            for name, errors in exc.message_dict.items()
            for message in errors
        ]
    else:
        lines = [f"{prefix}{message}" for message in exc.messages]
    return Refused("\n".join(lines))


def _diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, list[Any]]:
    return {name: [before[name], after[name]] for name in after if before.get(name) != after[name]}


def _diff_lines(diff: Mapping[str, list[Any]]) -> list[str]:
    """The changes for a person (and a pipeline's log): secret-looking arguments masked."""
    return [
        f"  {name}: {json.dumps(a)} -> {json.dumps(b)}"
        for name, (a, b) in redact_changes(dict(diff)).items()
    ]


def set_fields(options: dict[str, Any]) -> Reply:
    given: dict[str, str] = {
        field: options[f"set_{option}"]
        for option, field in OPTION_FIELDS.items()
        if options.get(f"set_{option}") is not None
    }
    for pair in options.get("field") or []:
        name, sep, text = pair.partition("=")
        if not sep:
            raise Usage(f"--field {pair!r}: give NAME=VALUE.")
        if name not in DEFINITION_FIELDS:
            raise Refused(
                f"--field {name!r} is not a field of a job's definition; give one of "
                f"{', '.join(DEFINITION_FIELDS)}."
            )
        given[name] = text
    if not given:
        raise Usage("Nothing to set: give at least one field (see cron set -h).")
    with transaction.atomic():
        job = find_job(options["job"])
        job = JobDefinition.objects.select_for_update().get(pk=job.pk)
        if job.code_owned:
            raise Refused(job.code_owned)
        if options["if_version"] and options["if_version"] != version_of(job):
            raise Refused(
                f"{job.name} changed since version {options['if_version']}: it is now at "
                f"{version_of(job)}. Look at it again (cron describe) and retry with that version."
            )
        before = job_data(job)
        zone = zone_or_utc(given.get("timezone", job.timezone))
        for name, text in given.items():
            where = f"--{name.replace('_', '-')}" if name in OPTION_FIELDS.values() else name
            setattr(job, name, _value(name, text, where=where, zone=zone))
        try:
            job.full_clean()
        except ValidationError as exc:
            raise _refusal(exc) from None
        after = job_data(job)
        diff = _diff(before, after)
        if options["dry_run"] or not diff:
            transaction.set_rollback(True)
        else:
            with audit.acting(options["by"], via="cli"):
                job.save()
    if not diff:
        text = f"{job.name}: nothing changes."
    elif options["dry_run"]:
        text = "\n".join([f"{job.name} would change (dry run, nothing saved):", *_diff_lines(diff)])
    else:
        text = "\n".join([f"{job.name} changed:", *_diff_lines(diff)])
    data = {
        "job": {"id": job.pk, "name": job.name},
        "changes": redact_changes(diff),
        "dry_run": bool(options["dry_run"]),
        "version": version_of(job),
    }
    return Reply(data, text)


def export_jobs(options: dict[str, Any]) -> Reply:
    if options["names"]:
        jobs = [find_job(name) for name in options["names"]]
    else:
        jobs = list(JobDefinition.objects.order_by("name"))
    data = {"jobs": [job_data(job, state=True) for job in jobs]}
    if options["format"] == "yaml":
        return Reply(data, _yaml().safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())
    return Reply(data, json.dumps(data, indent=2, ensure_ascii=False))


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:
        raise Refused(
            "YAML needs PyYAML: pip install 'django-cluster-cron[yaml]' (or use --format json)."
        ) from None
    return yaml


def _read(path: str) -> list[Any]:
    try:
        text = Path(path).read_text(encoding="utf-8") if path != "-" else _stdin()
    except OSError as exc:
        raise Refused(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise Refused(f"{path}: not UTF-8 text (what cron export writes).") from None
    try:
        found = _yaml().safe_load(text) if path.endswith((".yaml", ".yml")) else json.loads(text)
    except ValueError as exc:
        raise Refused(f"{path}: not JSON ({exc}).") from None
    except Exception as exc:  # yaml's own errors
        raise Refused(f"{path}: not YAML ({exc}).") from None
    jobs = found.get("jobs") if isinstance(found, dict) else found
    if not isinstance(jobs, list):
        raise Refused(f'{path}: give {{"jobs": [...]}} (as cron export writes) or a list of jobs.')
    return jobs


def _stdin() -> str:
    import sys

    return sys.stdin.read()


def import_jobs(options: dict[str, Any]) -> Reply:
    specs = _read(options["file"])
    known = {"name", *STATE_FIELDS, *DEFINITION_FIELDS}
    problems: list[str] = []
    planned: list[tuple[str, JobDefinition, dict[str, list[Any]]]] = []
    seen: set[str] = set()
    for index, spec in enumerate(specs):
        where = f"jobs[{index}]"
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            problems.append(f"{where}: give an object with the job's name.")
            continue
        name = spec["name"]
        where = f"job {name!r}"
        if name in seen:
            problems.append(f"{where}: given twice.")
            continue
        seen.add(name)
        unknown = sorted(set(spec) - known - {"id"})
        if unknown:
            problems.append(
                f"{where}: {', '.join(map(repr, unknown))} is not a field of a job; give "
                "name, enabled, pause_note or a definition field."
            )
            continue
        existing = JobDefinition.objects.filter(name=name).first()
        job = existing or JobDefinition(name=name)
        before = job_data(job, state=True) if existing else {}
        zone = zone_or_utc(spec.get("timezone") or job.timezone)
        try:
            for field, value in spec.items():
                if field in ("id", "name"):
                    continue
                if field in MOMENTS and isinstance(value, str) and value:
                    value = parse_when(value, timezone.now(), zone, what=f"{where}, {field}")
                elif isinstance(value, datetime) and value.tzinfo is None:  # YAML's own
                    value = value.replace(tzinfo=zone)
                setattr(job, field, value)
            job.full_clean()
        except ValidationError as exc:
            problems.append(str(_refusal(exc, prefix=f"{where}, ")))
            continue
        except Refused as exc:
            problems.append(str(exc))
            continue
        except (TypeError, ValueError) as exc:  # a value of a type no field takes (a YAML int)
            problems.append(f"{where}: a value is not of the type its field takes ({exc}).")
            continue
        diff = _diff(before, job_data(job, state=True)) if existing else {}
        if existing is not None and existing.code_owned and set(diff) - set(STATE_FIELDS):
            problems.append(f"{where}: {existing.code_owned}")
            continue
        action = "create" if existing is None else ("update" if diff else "keep")
        planned.append((action, job, diff))
    if problems:
        raise Refused("Nothing imported:\n" + "\n".join(problems))
    if not options["dry_run"]:
        with transaction.atomic(), audit.acting(options["by"], via="cli", note="cron import"):
            for action, job, _diff_found in planned:
                if action != "keep":
                    job.save()
    counts = Counter(action for action, _, _ in planned)
    dry = options["dry_run"]
    lines = [
        (f"Would {action} {job.name}" if dry else f"{DONE[action].capitalize()} {job.name}")
        + ("" if not diff else ":\n" + "\n".join(_diff_lines(diff)))
        for action, job, diff in planned
        if action != "keep"
    ]
    lines.append(
        (
            f"{counts['create']} to create, {counts['update']} to update"
            if dry
            else f"{counts['create']} created, {counts['update']} updated"
        )
        + f", {counts['keep']} unchanged"
        + (" (dry run: nothing saved)." if dry else ".")
    )
    data = {
        "dry_run": bool(options["dry_run"]),
        "jobs": [
            {"name": job.name, "action": action, "changes": diff} for action, job, diff in planned
        ],
    }
    return Reply(data, "\n".join(lines))
