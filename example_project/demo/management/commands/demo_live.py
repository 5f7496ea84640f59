"""`manage.py demo_live`: the cluster on this machine, live in the terminal (`make demo`).

Starts a Celery worker, two schedulers, the dev server and (with --own-redis-port) a throwaway
Redis; shows them live, with keys to kill the leader or stop Redis; stops everything on q or
Ctrl-C. With --script (or when stdout is not a terminal) it plays the failover story by itself
and exits 1 if a step does not happen in time. scripts/demo.sh prepares the database first.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console

from demo.live.app import Demo, DemoError, Options, stop_on_signals


def _seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number <= 0:
        raise ValueError(value)
    return number


class Command(BaseCommand):
    help = (
        "Run the demo cluster and show it live (keys: k kill leader, t stop it, r Redis, q quit)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--script",
            action="store_true",
            default=os.environ.get("DEMO_SCRIPT", "") not in ("", "0"),
            help="Play the story unattended and exit (default when stdout is not a terminal, "
            "or DEMO_SCRIPT=1).",
        )
        parser.add_argument("--port", type=int, default=8000, help="Dev server port.")
        parser.add_argument(
            "--own-redis-port",
            type=int,
            help="Start a throwaway Redis on this port (REDIS_URL must point at it); the demo "
            "may stop and restart it. Without it, REDIS_URL must name a running Redis, which "
            "the demo never stops.",
        )
        parser.add_argument("--lease-ttl", type=_seconds, default=3.0, help="Lease TTL, s.")
        parser.add_argument(
            "--poll-interval", type=_seconds, default=0.5, help="Standby poll interval, s."
        )
        parser.add_argument("--login", default="admin / admin", help="Shown in the header.")
        parser.add_argument(
            "--tasks",
            choices=["celery", "django"],
            default="celery",
            help="celery: a Celery worker on Redis; django: the jobs' django.tasks tasks on two "
            "db_worker processes, three schedulers, no Redis and no broker.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["tasks"] == "celery" and not os.environ.get("REDIS_URL"):
            raise CommandError(
                "REDIS_URL is not set. Run `make demo` (scripts/demo.sh starts a throwaway Redis "
                "and sets it), or set REDIS_URL to a Redis you want the demo to use."
            )
        if options["poll_interval"] >= options["lease_ttl"]:
            raise CommandError("--poll-interval must be below --lease-ttl.")
        port = options["own_redis_port"]
        if port is not None and f"127.0.0.1:{port}/" not in os.environ["REDIS_URL"] + "/":
            raise CommandError(
                f"--own-redis-port {port} but REDIS_URL={os.environ['REDIS_URL']} points elsewhere."
            )
        scripted = options["script"] or not sys.stdout.isatty() or not sys.stdin.isatty()
        demo = Demo(
            Options(
                lease_ttl=options["lease_ttl"],
                poll_interval=options["poll_interval"],
                port=options["port"],
                own_redis_port=port,
                login=options["login"],
                tasks=options["tasks"],
            )
        )
        admin = f"http://127.0.0.1:{options['port']}/admin/ (login {options['login']})"
        if scripted and not options["script"]:
            # First, so whoever piped the output knows why there is no live screen.
            self.write_line(
                "[demo] the output is not a terminal, so the demo plays its failover story "
                "unattended (about 30 s) and exits; run `make demo` in a terminal for the live "
                "screen and its keys"
            )
        if scripted:
            self.write_line(f"[demo] the admin, while the story plays: {admin}")
        failed: str | None = None
        with stop_on_signals():
            try:
                self.stderr.write(f"[demo] starting the cluster; logs in {demo.log_dir}")
                demo.start()
                if scripted:
                    from demo.live.story import Story, StoryFailed

                    try:
                        Story(demo, self.write_line).play()
                    except StoryFailed as exc:
                        failed = f"demo script FAILED: {exc}"
                else:
                    from demo.live.interactive import run

                    run(demo, Console())
            except KeyboardInterrupt:
                self.stderr.write("[demo] interrupted")
            except DemoError as exc:
                failed = f"demo: {exc}"
            finally:
                self.stderr.write("[demo] stopping everything the demo started…")
                demo.close()
                self.stderr.write(f"[demo] stopped; logs kept in {demo.log_dir}")
        if failed:
            self.stderr.write(failed)
            sys.exit(1)

    def write_line(self, text: str) -> None:
        # Flushed line by line: under CI stdout is a pipe, and the story should show as it plays.
        self.stdout.write(text)
        self.stdout.flush()
