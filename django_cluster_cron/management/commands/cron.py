"""``manage.py cron <verb>``: the operator's terminal (see :mod:`django_cluster_cron.cli`).

Exit status: 0 done; 1 refused (the reason on stderr), or the run ``trigger --wait`` followed did
not succeed; 2 a usage error. ``--json`` prints the reply's stable shape instead of the text.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...actions import REPROCESS, ActionRefused
from ...cli import acting, editing, reading
from ...cli.common import Refused, Reply, Usage, default_actor
from ...models import OverlapPolicy, RunStatus

EXAMPLES = {
    "list": """examples:
  manage.py cron list
  manage.py cron list --failing --json
  manage.py cron list --search report""",
    "describe": """examples:
  manage.py cron describe nightly-report
  manage.py cron describe 42 --json""",
    "next": """examples:
  manage.py cron next nightly-report --count 5
  manage.py cron next nightly-report --between now now+7d
  manage.py cron next --expr "30 2 * * MON-FRI" --tz Europe/Paris""",
    "runs": """examples:
  manage.py cron runs nightly-report --limit 20
  manage.py cron runs --status failed --since now-1d --json""",
    "trigger": """examples:
  manage.py cron trigger nightly-report
  manage.py cron trigger nightly-report --wait --timeout 600   # exits 1 unless it succeeds
  manage.py cron trigger nightly-report --kwargs '{"day": "2026-11-29"}' --wait""",
    "backfill": """examples:
  manage.py cron backfill nightly-report --from 2026-11-01 --to 2026-11-08 --dry-run
  manage.py cron backfill nightly-report --from now-2d --to now --reprocess failed --yes""",
    "set": """examples:
  manage.py cron set nightly-report --schedule "0 3 * * *" --dry-run
  manage.py cron set nightly-report --kwargs '{"region": "eu"}' --if-version 20261130T114914.123456Z
  manage.py cron set nightly-report --field max_runs=10 --field jitter=30""",
    "export": """examples:
  manage.py cron export > jobs.json
  manage.py cron export nightly-report --format yaml""",
    "import": """examples:
  manage.py cron import jobs.json --dry-run
  manage.py cron import jobs.json --yes""",
    "pause": """examples:
  manage.py cron pause nightly-report --note "vendor API down, ticket OPS-12" """,
    "resume": """examples:
  manage.py cron resume nightly-report""",
    "retry": """examples:
  manage.py cron retry 1234
  manage.py cron retry --job nightly-report --failed --since now-1d --yes""",
    "cancel": """examples:
  manage.py cron cancel 1234 --reason "wrong input" --yes""",
}
HELP = {
    "list": "The jobs, soonest next run first: next, time left, last run and its result.",
    "describe": "One job: its schedule in words, policies, next 10 runs, last 10 runs, alerts.",
    "next": "The next fire times of a job, or of an expression before it is saved.",
    "runs": "The ledger's runs, newest first.",
    "trigger": "Run a job now (a manual run; its schedule does not move).",
    "backfill": "Make the runs a job's past slots in a range did not get (and run some again).",
    "set": "Change only the fields given of a job (checked against its version if asked).",
    "export": "Print job definitions, as import reads them back.",
    "import": "Create or update jobs from what export printed (all or nothing).",
    "pause": "Pause a job, with a note saying why.",
    "resume": "Resume a paused job from its next slot (no catch-up).",
    "retry": "Run a failed run again (its next attempt), or every failed run of a job.",
    "cancel": "Cancel a waiting run, or ask a running one to stop.",
}
# Verbs that change or stop work: asked for --yes when no one is at a terminal to mean it.
DESTRUCTIVE = {"cancel", "retry", "backfill", "import"}


class Command(BaseCommand):
    help = "The operator's terminal: list, describe, preview, run, pause and retry jobs."
    # An operator's quick look does not wait on the project's system checks (migrate does).
    requires_system_checks = ()

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
        made: dict[str, Any] = {}
        for verb in HELP:
            made[verb] = verbs.add_parser(
                verb,
                help=HELP[verb],
                description=HELP[verb],
                epilog=EXAMPLES[verb],
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
            made[verb].add_argument("--json", action="store_true", help="Print JSON.")
            made[verb].add_argument(
                "--by",
                default=None,
                help="Who acts, for the job's audit trail (default: the OS user and host).",
            )
            made[verb].add_argument(
                "--yes",
                action="store_true",
                help="Do it without asking (needed where no one is at a terminal).",
            )

        listing = made["list"]
        listing.add_argument("--paused", action="store_true", help="Only paused jobs.")
        listing.add_argument(
            "--failing", action="store_true", help="Only jobs whose last run failed."
        )
        listing.add_argument(
            "--late", action="store_true", help="Only enabled jobs whose next run is past."
        )
        listing.add_argument("--search", default="", help="Part of a job's name or task.")

        made["describe"].add_argument("job", help="The job's name (or id).")

        upcoming = made["next"]
        upcoming.add_argument("job", nargs="?", help="The job's name (or id).")
        upcoming.add_argument("--expr", help="A schedule to preview instead of a job's.")
        upcoming.add_argument("--tz", help="The zone (default: the job's, or UTC).")
        upcoming.add_argument("--count", type=int, default=10, help="How many (default 10).")
        upcoming.add_argument(
            "--between", nargs=2, metavar=("A", "B"), help="Every fire time from A to B."
        )

        runs = made["runs"]
        runs.add_argument("job", nargs="?", help="Only this job's runs.")
        runs.add_argument(
            "--status",
            action="append",
            metavar="STATUS",
            help=f"One of {', '.join(RunStatus.values)} (repeatable).",
        )
        runs.add_argument("--since", help="Slots from then on (now-1d, 2026-12-01, …).")
        runs.add_argument("--limit", type=int, default=50, help="How many (default 50).")

        trigger = made["trigger"]
        trigger.add_argument("job", help="The job's name (or id).")
        trigger.add_argument(
            "--overlap-policy",
            choices=list(OverlapPolicy.values),
            help="This run's overlap policy instead of the job's.",
        )
        trigger.add_argument(
            "--kwargs",
            metavar="JSON",
            help="Keyword arguments for this run alone, over the job's (a JSON object).",
        )
        trigger.add_argument(
            "--wait", action="store_true", help="Follow the run; exit 0 only if it succeeds."
        )
        trigger.add_argument(
            "--timeout", type=float, default=3600.0, help="Seconds --wait waits (default 3600)."
        )

        backfill = made["backfill"]
        backfill.add_argument("job", help="The job's name (or id).")
        backfill.add_argument("--from", required=True, help="The range's start (not included).")
        backfill.add_argument("--to", required=True, help="The range's end (included).")
        backfill.add_argument(
            "--reprocess",
            choices=REPROCESS,
            default="none",
            help="Runs of the range to run again: none (default), failed, or all that ended.",
        )
        backfill.add_argument(
            "--overlap-policy",
            choices=list(OverlapPolicy.values),
            help="The runs' overlap policy (default buffer_all: one after another).",
        )
        backfill.add_argument(
            "--dry-run", action="store_true", help="Print what it would do; do nothing."
        )

        change = made["set"]
        change.add_argument("job", help="The job's name (or id).")
        for option, field in editing.OPTION_FIELDS.items():
            change.add_argument(
                f"--{option.replace('_', '-')}",
                dest=f"set_{option}",  # "args" is call_command's own
                metavar="VALUE",
                help=f"The job's {field}" + (" (JSON)." if field in ("args", "kwargs") else "."),
            )
        change.add_argument(
            "--field",
            action="append",
            metavar="NAME=VALUE",
            help="Any field of the definition (JSON for a JSON field); repeatable.",
        )
        change.add_argument(
            "--if-version",
            metavar="VERSION",
            help="Refuse unless the job is still at this version (describe --json gives it).",
        )
        change.add_argument(
            "--dry-run", action="store_true", help="Print the changes; save nothing."
        )

        export = made["export"]
        export.add_argument("names", nargs="*", metavar="JOB", help="These jobs (default: all).")
        export.add_argument("--format", choices=editing.FORMATS, default="json")

        importing = made["import"]
        importing.add_argument("file", help="A file export wrote (.json, .yaml), or - for stdin.")
        importing.add_argument(
            "--dry-run", action="store_true", help="Print what would change; save nothing."
        )

        pause = made["pause"]
        pause.add_argument("job", help="The job's name (or id).")
        pause.add_argument("--note", default="", help="Why, shown beside the job.")
        made["resume"].add_argument("job", help="The job's name (or id).")

        retry = made["retry"]
        retry.add_argument("run", nargs="?", help="The run's id.")
        retry.add_argument("--job", help="Every failed run of this job (with --failed).")
        retry.add_argument("--failed", action="store_true", help="With --job: its failed runs.")
        retry.add_argument("--since", help="With --job: slots from then on.")

        cancel = made["cancel"]
        cancel.add_argument("run", help="The run's id.")
        cancel.add_argument("--reason", default="", help="Why, recorded on the run.")

    def handle(self, *args: Any, **options: Any) -> None:
        verb = options["verb"]
        options["by"] = (options.get("by") or default_actor())[:150]
        self._confirm(verb, options)
        try:
            reply = self._reply(verb, options)
        except Usage as exc:
            raise CommandError(str(exc), returncode=2) from None
        except (Refused, ActionRefused) as exc:  # the admin's refusals are the verbs' too
            raise CommandError(str(exc), returncode=1) from None
        for warning in reply.warnings:
            self.stderr.write(warning)
        if options["json"] or (verb == "export" and options["format"] == "json"):
            self.stdout.write(json.dumps(reply.data, indent=2, ensure_ascii=False))
        else:
            self.stdout.write(reply.text)
        if reply.code:  # ``trigger --wait``: the run did not succeed; why, on stderr too
            raise CommandError(reply.text.splitlines()[-1], returncode=reply.code)

    def _reply(self, verb: str, options: dict[str, Any]) -> Reply:
        if verb == "list":
            return reading.list_jobs(options)
        if verb == "describe":
            return reading.describe_job(options)
        if verb == "next":
            return reading.next_times(options)
        if verb == "runs":
            return reading.list_runs(options)
        if verb == "trigger":
            quiet = options["json"]
            return acting.trigger(
                options, echo=(lambda _text: None) if quiet else self.stdout.write
            )
        return {
            "backfill": acting.backfill,
            "set": editing.set_fields,
            "export": editing.export_jobs,
            "import": editing.import_jobs,
            "pause": acting.pause,
            "resume": acting.resume,
            "retry": acting.retry,
            "cancel": acting.cancel,
        }[verb](options)

    def _confirm(self, verb: str, options: dict[str, Any]) -> None:
        """A destructive verb asks first at a terminal; without one it needs --yes."""
        bulk = verb == "retry" and bool(options.get("job"))
        if verb not in DESTRUCTIVE or options["yes"] or options.get("dry_run"):
            return
        if verb == "retry" and not bulk:
            return
        if not sys.stdin.isatty():
            what = "jobs" if verb == "import" else "runs"
            raise CommandError(
                f"cron {verb} changes {what} and no one is at a terminal to confirm: add --yes.",
                returncode=1,
            )
        # The question on stderr: stdout may be a file being written (--json > out.json).
        sys.stderr.write(f"cron {verb}: go ahead? [y/N] ")
        sys.stderr.flush()
        answer = sys.stdin.readline()
        if answer.strip().lower() not in ("y", "yes"):
            raise CommandError("Nothing done.", returncode=1)
