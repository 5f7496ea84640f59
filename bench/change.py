"""Change propagation: edit one job among N; time and cost until the scheduler acts on it.

    .venv/bin/python bench/change.py [--sizes ...] [--reps 3] [--quick] [--cap 120] [--json PATH]

Each system runs its real loop in a thread (its own sleeps included), with N idle jobs
(``0 * 1 1 *``). The main thread edits job ``bench-0`` to ``* * * * *`` the way each system's
users do (ours: ``JobDefinition.save()``, which sends the change signal; DatabaseScheduler:
``PeriodicTask.save()``, which bumps its change counter; redbeat: ``RedBeatSchedulerEntry.save()``)
and measures the time until the loop's next decision reflects the edit, and what that took:
ours = the first idle query (``idle_state()``) that returns the job's new next run;
DatabaseScheduler = the first tick after which its in-memory entry holds the new crontab (it
reloads every job);
redbeat = the first tick after the edit (it keeps no schedule in memory: each tick reads Redis).
Then the edit is undone and awaited the same way before the next repetition.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import _peers as peers
from _env import boot
from _report import Report, parser, sizes_and_reps

DESCRIPTION = (
    "N idle jobs (0 * 1 1 *); one of them is edited to * * * * * while the scheduler's own loop "
    "runs in a thread with its real sleeps (DatabaseScheduler and redbeat: max_interval 5 s; "
    "ours: woken by its change signal). Reaction = from just before the save until the loop's "
    "next decision reflects it (ours: the idle query returns the new next run; "
    "DatabaseScheduler: its entry holds the new crontab after a tick; redbeat: the first tick "
    "after the save, as it reads Redis each tick). Cost = SQL queries and Redis commands the "
    "scheduler ran between the save and that decision, and the duration of the pass that made "
    "it (for DatabaseScheduler: the full reload)."
)

TARGET_NAME = "bench-0"


class Loop(threading.Thread):
    """Runs ``step`` forever, sleeping what it returns; logs each pass and the SQL it ran."""

    def __init__(
        self,
        step: Callable[[], float],
        observe: Callable[[], Any],
        sleep: Callable[[float, threading.Event], Any] | None = None,
        prepare: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.step, self.observe = step, observe
        self.sleep = sleep or (lambda delay, stop: stop.wait(delay))
        self.prepare = prepare  # runs in the loop's thread (redbeat's lock token is per thread)
        self.stop = threading.Event()
        self.passes: list[tuple[float, float, Any]] = []  # (start, end, observed)
        self.queries: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        from django.db import connection

        def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            self.queries.append(time.perf_counter())
            return execute(sql, params, many, context)

        try:
            if self.prepare is not None:
                self.prepare()
            with connection.execute_wrapper(wrapper):
                while not self.stop.is_set():
                    started = time.perf_counter()
                    delay = self.step()
                    self.passes.append((started, time.perf_counter(), self.observe()))
                    if delay > 0:
                        self.sleep(delay, self.stop)
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            connection.close()

    def wait_for(self, since: float, wanted: Callable[[Any], bool], cap: float) -> tuple | None:
        deadline = time.perf_counter() + cap
        while time.perf_counter() < deadline:
            if self.error is not None:
                raise SystemExit(f"scheduler loop failed: {self.error!r}")
            for started, ended, seen in list(self.passes):
                if started >= since and wanted(seen):
                    return started, ended, seen
            time.sleep(0.005)
        return None


def measure(
    report: Report,
    system: str,
    n: int,
    reps: int,
    cap: float,
    loop: Loop,
    edit: Callable[[bool], Any],
    reflected: Callable[[Any, bool], bool],
    close: Callable[[], None],
) -> float | None:
    reaction, queries, commands, pass_ms = [], [], [], []
    note = ""
    loop.start()
    try:
        time.sleep(0.5)  # let the loop settle (lease, first read)
        for _ in range(reps):
            for edited in (True, False):
                before_cmds = peers.redis_commands()
                since = time.perf_counter()
                expected = edit(edited)
                found = loop.wait_for(since, lambda seen, e=expected: reflected(seen, e), cap)
                if found is None:
                    note = f"not reflected within {cap:g} s (lower bound)"
                    reaction.append(cap)
                    break
                started, ended, _ = found
                if edited:
                    reaction.append(ended - since)
                    queries.append(sum(since <= q <= ended for q in loop.queries))
                    commands.append(peers.redis_commands() - before_cmds - 1)
                    pass_ms.append((ended - started) * 1000)
            if note:
                break
    finally:
        loop.stop.set()
        loop.join(30)
        close()
    row = report.row(system, n, "reaction time", "s", reaction, note=note)
    if queries:
        report.row(system, n, "SQL queries until reflected", "queries", queries)
        report.row(system, n, "Redis commands until reflected", "count", commands)
        report.row(system, n, "duration of the reacting pass", "ms", pass_ms)
    return None if note else float(row["median"])


def run_ours(report: Report, n: int, reps: int, cap: float) -> float | None:
    from django_cluster_cron.models import JobDefinition
    from django_cluster_cron.scheduler import build_scheduler

    peers.setup_ours(n, peers.IDLE)
    scheduler = build_scheduler(node_id=f"change-{n}")
    seen: dict[str, Any] = {}
    original = scheduler.recorder.idle_state

    def idle_state() -> Any:
        state = original()
        seen["value"] = state.next_due if state else None
        return state

    scheduler.recorder.idle_state = idle_state  # type: ignore[method-assign]

    def edit(edited: bool) -> Any:
        job = JobDefinition.objects.get(name=TARGET_NAME)
        job.cron = "* * * * *" if edited else peers.IDLE
        job.save()
        return JobDefinition.objects.filter(enabled=True).order_by("next_run_at")[0].next_run_at

    loop = Loop(scheduler.step, lambda: seen.get("value"), scheduler.sleeper.wait)
    result = measure(
        report,
        "ours",
        n,
        reps,
        cap,
        loop,
        edit,
        lambda value, expected: value == expected,
        scheduler.shutdown,
    )
    peers.clear_ours()
    return result


def run_beat(report: Report, n: int, reps: int, cap: float) -> float | None:
    from django_celery_beat.models import PeriodicTask

    peers.setup_beat(n, peers.IDLE)
    every, idle = peers._crontab("* * * * *"), peers._crontab(peers.IDLE)
    scheduler = peers.build_beat()

    def observe() -> Any:
        entry = (scheduler._schedule or {}).get(TARGET_NAME)
        return None if entry is None else entry.model.crontab_id

    def edit(edited: bool) -> Any:
        task = PeriodicTask.objects.get(name=TARGET_NAME)
        task.crontab = every if edited else idle
        task.save()
        return task.crontab_id

    loop = Loop(lambda: peers.beat_step(scheduler), observe)
    result = measure(
        report,
        "django-celery-beat",
        n,
        reps,
        cap,
        loop,
        edit,
        lambda value, expected: value == expected,
        lambda: peers.close_scheduler(scheduler),
    )
    peers.clear_beat()
    return result


def run_redbeat(report: Report, n: int, reps: int, cap: float) -> float | None:
    from celery.schedules import crontab
    from redbeat import RedBeatSchedulerEntry

    peers.setup_redbeat(n, peers.IDLE)
    app = peers.redbeat_app()
    scheduler = peers.build_redbeat(lock=False)
    key = RedBeatSchedulerEntry.generate_key(app, TARGET_NAME)

    def edit(edited: bool) -> Any:
        entry = RedBeatSchedulerEntry.from_key(key, app=app)
        fields = ("*", "*", "*", "*", "*") if edited else ("0", "*", "*", "1", "1")
        minute, hour, dom, month, dow = fields
        entry.schedule = crontab(minute, hour, dow, dom, month, app=app)
        entry.save()
        return None

    loop = Loop(
        lambda: float(scheduler.tick()),
        lambda: None,
        prepare=lambda: peers.take_redbeat_lock(scheduler),
    )
    result = measure(
        report,
        "celery-redbeat",
        n,
        reps,
        cap,
        loop,
        edit,
        lambda value, expected: True,
        lambda: peers.close_scheduler(scheduler),
    )
    peers.clear_redbeat()
    return result


def main() -> None:
    args = parser(__doc__ or "", reps=3).parse_args()
    sizes, reps = sizes_and_reps(args)
    cap = args.cap or (20.0 if args.quick else 120.0)
    boot()
    peers.quiet()
    report = Report("change", "Change propagation: edit one job among N", DESCRIPTION)
    for n in sizes:
        ours = run_ours(report, n, reps, cap)
        for name, run in (("django-celery-beat", run_beat), ("celery-redbeat", run_redbeat)):
            peer = run(report, n, reps, cap)
            if ours and peer:
                report.ratio(f"{name} / ours, reaction time, N={n:,}", peer / ours)
        beat_q = report.find("django-celery-beat", "SQL queries until reflected", n)
        ours_q = report.find("ours", "SQL queries until reflected", n)
        if beat_q and ours_q and ours_q["median"]:
            report.ratio(
                f"django-celery-beat / ours, queries until reflected, N={n:,}",
                beat_q["median"] / ours_q["median"],
            )
    report.write(args.json)


if __name__ == "__main__":
    main()
