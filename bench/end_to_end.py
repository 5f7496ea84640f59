"""End to end: N jobs due at one instant, fire time to the job's code started and finished, for
ours, celery-redbeat and django-celery-beat with the same worker and task, beside the limit.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/end_to_end.py \\
        [--sizes 2000 10000] [--tasks trivial write] [--systems drain ours pieces redbeat beat] \\
        [--reps 1] [--concurrency 4] [--cap 900] [--quick] [--json PATH] [--profile SECONDS]

Each trial starts from an empty database and broker, then one Celery worker of the test app
(prefork, ``--concurrency`` processes, INFO log, the same for every system) and the system's
scheduler as its real process with its shipped defaults: ``run_scheduler`` (ours),
``celery beat -S redbeat.RedBeatScheduler`` (its loop interval set to 5 s, see REDBEAT_CONF),
``celery beat -S django_celery_beat...``. N jobs
of the task ``tests.stamp`` share a daily cron whose slot is a minute boundary far enough ahead
for the set-up; each job last ran the day before (celery-redbeat files an entry whose last run
is after now as due about twice as far ahead as its slot). The task's body notes, in a file of its
worker process, its task id and the wall-clock times its body started and ended; the latencies
are those times minus the slot (the same clock: one machine). ``write``: the body first makes
one database write (a row through the ORM, on Django's connection, ``CONN_MAX_AGE`` 0 as a
project's default), the common real case.

``pieces`` is ours with the N bodies as the pieces of one job's slot instead of N jobs (the
leader records one run; the worker that takes it records the N pieces and sends them): the
same worker, task and stamps; its note ``split_s`` is what recording the pieces cost that worker.

``drain`` is the limit: the same N tasks published straight into the queue, then the worker
started; its latencies are counted from the first body's start. A scheduler cannot finish a
burst sooner than the worker drains it.

Also printed: executions beyond one per job (none expected from any system), for ours the runs
the outbox sent more than once, and for each system the CPU time each group of processes used
through the burst, in ms a run (``_cpu.py``: the worker's main and pool processes, the scheduler,
PostgreSQL, the bench's Redis). ``--profile SECONDS``: where one pool process's Python time goes,
function by function, through an extra burst of each system, not counted (``_profile.py``;
needs py-spy). A trial that has not finished within ``--cap`` seconds of its slot, or whose
scheduler process exited, reports what had finished then.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import _peers
from _cpu import GROUPS, CpuMeter
from _procs import (
    DATABASE_SCHEDULER,
    REDBEAT_SCHEDULER,
    clean,
    log_dir,
    percentile,
    row,
    start_beat,
    start_ours,
    start_worker,
    stop,
    write_json,
)
from _profile import PoolProfile

TASK = "tests.stamp"
ARGS = {"trivial": [], "write": [True]}
# celery-redbeat as shipped sleeps up to beat's max_interval, 300 s, between ticks, and a tick
# that wakes at an instant loads only the first of the entries due then (its look-ahead reads
# one): the other N - 1 wait 300 s. Given DatabaseScheduler's own 5 s, they wait 5 s.
REDBEAT_CONF = {"beat_max_loop_interval": 5}
SYSTEMS = ("drain", "ours", "pieces", "redbeat", "beat")
LABELS = {
    "drain": "bare drain (the limit)",
    "ours": "django-cluster-cron",
    "pieces": "ours, one job of N pieces",
    "redbeat": "celery-redbeat",
    "beat": "django-celery-beat",
}


def setup_pieces(n: int, cron: str, task: str, args: list[Any], last: datetime) -> float:
    """One job of N pieces on the same cron and task (the leader records one run; the worker
    that takes it records the N pieces and sends them)."""
    from django_cluster_cron.models import JobDefinition
    from django_cluster_cron.schedule import fire_times

    _peers.clear_ours()
    started = time.perf_counter()
    JobDefinition.objects.create(
        name="bench-pieces",
        cron=cron,
        timezone="UTC",
        task=task,
        args=args,
        catchup_policy="all",
        pieces=n,
        last_scheduled_at=last,
        next_run_at=fire_times(cron, "UTC", last, 1)[0],
    )
    return time.perf_counter() - started


def split_cost(worker_log: Path) -> dict[str, Any]:
    """What recording the pieces cost the worker that took the run (its ``run.pieces_recorded``
    line: seconds to write the N rows and mark the first sent)."""
    found = re.search(r"run\.pieces_recorded .*?seconds=([0-9.]+)", worker_log.read_text())
    return {"split_s": float(found.group(1))} if found else {"split_s": "not logged"}


def read_stamps(directory: Path) -> list[tuple[str, float, float]]:
    found = []
    for path in directory.glob("*.log"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:  # a line being written is skipped until it is whole
                found.append((parts[0], float(parts[1]), float(parts[2])))
    return found


def next_slot(lead: float, minute: bool) -> datetime:
    """The first minute boundary (or second, ``minute`` False) at least ``lead`` s from now."""
    earliest = datetime.now(timezone.utc) + timedelta(seconds=lead)
    slot = earliest.replace(second=0 if minute else earliest.second, microsecond=0)
    step = timedelta(minutes=1) if minute else timedelta(seconds=1)
    return slot if slot >= earliest else slot + step


def publish_bare(n: int, args: list[Any]) -> None:
    app = _peers.celery_app()
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            app.send_task(TASK, args=args, producer=producer)


def wait_for_stamps(
    directory: Path, n: int, deadline: float, scheduler: Any = None
) -> list[tuple[str, float, float]]:
    """Until N bodies have run, the deadline, or the scheduler process has exited and nothing
    more has run for 10 s (it will send nothing more)."""
    last_count, last_change = -1, time.time()
    while True:
        stamps = read_stamps(directory)
        if len(stamps) != last_count:
            last_count, last_change = len(stamps), time.time()
        if len(stamps) >= n or time.time() > deadline:
            return stamps
        exited = scheduler is not None and scheduler.poll() is not None
        if exited and time.time() - last_change > 10:
            return stamps
        time.sleep(0.5)


def trial(
    env: dict[str, str],
    system: str,
    n: int,
    kind: str,
    concurrency: int,
    cap: float,
    minute: bool = True,
    profile: PoolProfile | None = None,
) -> tuple[list[tuple[str, float, float]], float, dict[str, Any]]:
    """One burst: (stamps, zero time, notes). ``profile``: sample a pool process from the
    slot (the drain's start) on."""
    clean(env["REDIS_URL"])
    from tests.testapp.models import Execution

    Execution.objects.all()._raw_delete(Execution.objects.db)
    stamps = Path(tempfile.mkdtemp(prefix="dcc-stamps-"))
    child = dict(env, BENCH_STAMPS=str(stamps))
    name = f"{system}-{n}-{kind}"
    notes: dict[str, Any] = {}
    args = ARGS[kind]
    meter = CpuMeter()
    meter.redis_port = int(env["REDIS_URL"].rsplit(":", 1)[1].split("/")[0])
    try:
        if system == "drain":
            publish_bare(n, args)
            worker = start_worker(child, f"{name}-worker", concurrency)
            meter.worker = worker.pid
            meter.start()
            if profile is not None:
                profile.start(worker.pid, time.time())
            try:
                found = wait_for_stamps(stamps, n, time.time() + cap)
            finally:
                meter.stop()
                stop(worker)
            zero = min((s[1] for s in found), default=time.time())
            notes["cpu_s"] = meter.between(zero, max((s[2] for s in found), default=zero))
            return found, zero, notes
        worker = start_worker(child, f"{name}-worker", concurrency)
        meter.worker = worker.pid
        scheduler = None
        try:
            # Set-up before the slot: 20 s, plus time for the peers' per-entry saves. The peers'
            # crontab has minutes; a smoke run (ours alone) fires on the next second it can.
            slot = next_slot(20 + n / 2000 if minute else 8, minute)
            cron = f"{slot.minute} {slot.hour} * * *" + ("" if minute else f" {slot.second}")
            last = slot - timedelta(days=1)  # a daily job that ran yesterday
            setup = {
                "ours": _peers.setup_ours,
                "pieces": setup_pieces,
                "redbeat": _peers.setup_redbeat,
            }
            setup.get(system, _peers.setup_beat)(n, cron, task=TASK, args=args, last=last)
            if system in ("ours", "pieces"):
                scheduler = start_ours(child, f"{name}-scheduler")
            else:
                which = REDBEAT_SCHEDULER if system == "redbeat" else DATABASE_SCHEDULER
                conf = REDBEAT_CONF if system == "redbeat" else None
                scheduler = start_beat(child, which, f"{name}-scheduler", conf)
            meter.scheduler = scheduler.pid
            meter.start()
            if profile is not None:
                profile.start(worker.pid, slot.timestamp())
            ahead = (slot - datetime.now(timezone.utc)).total_seconds()
            if ahead < 5:
                notes["late_setup_s"] = round(-ahead, 1)
            found = wait_for_stamps(stamps, n, slot.timestamp() + cap, scheduler)
            if scheduler.poll() is not None:
                notes["scheduler_exited"] = f"code {scheduler.returncode}, see its log"
            if system == "ours":
                from django_cluster_cron.models import JobRun

                notes["republished"] = JobRun.objects.filter(publish_count__gt=1).count()
            if system == "pieces":
                notes.update(split_cost(log_dir() / f"{name}-worker.log"))
        finally:
            meter.stop()
            if scheduler is not None:
                stop(scheduler)
            stop(worker)
        last = max((s[2] for s in found), default=slot.timestamp())
        notes["cpu_s"] = meter.between(slot.timestamp(), last)
        return found, slot.timestamp(), notes
    finally:
        shutil.rmtree(stamps, ignore_errors=True)


def measured(
    found: list[tuple[str, float, float]], zero: float, n: int, notes: dict[str, Any]
) -> dict[str, float]:
    """Percentiles of one burst, seconds from ``zero``; what is off goes into ``notes``."""
    ids = [s[0] for s in found]
    started = [s[1] - zero for s in found]
    finished = [s[2] - zero for s in found]
    done = len(set(ids))
    if done < n:
        notes["finished"] = done
    if len(ids) > done:
        notes["extra_executions"] = len(ids) - done
    if not found:
        return dict.fromkeys(("start_p50", "start_p99", "p50", "p99", "max"), math.nan)
    return {
        "start_p50": percentile(started, 50),
        "start_p99": percentile(started, 99),
        "p50": percentile(finished, 50),
        "p99": percentile(finished, 99),
        "max": max(finished),
    }


def cpu_line(used: list[dict[str, float]], wall: float, n: int) -> str:
    """CPU by process group through the burst (medians over the reps), ms a run, and cores."""
    used = [u for u in used if u]
    if not used or not wall or math.isnan(wall):
        return ""
    median = {g: statistics.median(u.get(g, 0.0) for u in used) for g in GROUPS}
    total = sum(median.values())
    parts = ", ".join(f"{g} {1000 * v / n:.2f}" for g, v in median.items() if v > 0)
    return f"CPU ms a run: {parts}; total {1000 * total / n:.2f} ({total / wall:.2f} cores busy)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 10_000])
    parser.add_argument("--tasks", nargs="+", default=list(ARGS), choices=list(ARGS))
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--reps", type=int, default=1, help="bursts per system; medians")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--cap", type=float, default=900, help="seconds after the slot")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI smoke run: 200 jobs, trivial, ours (N jobs and N pieces) and the drain",
    )
    parser.add_argument("--json", help="write the results here (see bench/README.md)")
    parser.add_argument(
        "--profile",
        type=float,
        metavar="SECONDS",
        help="sample a pool process with py-spy for this long in an extra, uncounted burst",
    )
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.tasks, args.systems = [200], ["trivial"], ["drain", "ours", "pieces"]
    from _env import boot

    env = boot()
    _peers.quiet()
    sizes, kinds, systems = args.sizes, args.tasks, args.systems
    print(
        f"N jobs due at one instant, task {TASK}, one prefork worker (--concurrency "
        f"{args.concurrency}); seconds from the slot; logs in {log_dir()}"
    )
    rows = []
    ratios: list[dict[str, Any]] = []
    targets: list[dict[str, Any]] = []
    for kind in kinds:
        for n in sizes:
            print(f"\n{n} jobs, {kind} task")
            print(f"  {'system':<24} {'started p50/p99':>17} {'finished p50/p99/max':>24}")
            results: dict[str, dict[str, float]] = {}
            for system in systems:
                reps = []
                used: list[dict[str, float]] = []
                minute = not args.quick
                profile = PoolProfile(args.profile) if args.profile else None
                if profile is not None:  # a burst of its own: sampling slows the one it watches
                    trial(env, system, n, kind, args.concurrency, args.cap, minute, profile)
                for _ in range(args.reps):
                    found, zero, notes = trial(
                        env, system, n, kind, args.concurrency, args.cap, minute
                    )
                    reps.append(measured(found, zero, n, notes))
                    used.append(notes.pop("cpu_s", {}))
                m = {key: statistics.median(r[key] for r in reps) for key in reps[0]}
                results[system] = m
                print(
                    f"  {LABELS[system]:<24} {m['start_p50']:7.2f} /{m['start_p99']:7.2f}"
                    f"   {m['p50']:7.2f} /{m['p99']:7.2f} /{m['max']:7.2f}"
                    f"  {json.dumps(notes) if notes else ''}"
                )
                cpu = cpu_line(used, m["max"], n)
                if cpu:
                    print(f"  {'':<24} {cpu}")
                for line in profile.lines() if profile is not None else ():
                    print(f"  {'':<24} {line}")
                note = ", ".join(f"{k} {v}" for k, v in notes.items())
                for key, metric in (
                    ("start_p50", "started, p50"),
                    ("start_p99", "started, p99"),
                    ("p50", "finished, p50"),
                    ("p99", "finished, p99"),
                    ("max", "finished, max"),
                ):
                    values = [r[key] for r in reps]
                    label = LABELS[system]
                    rows.append(row(label, kind, n, f"fire to {metric}", "s", values, note))
            for system in ("ours", "pieces", "redbeat", "beat"):
                if system in results and "drain" in results:
                    value = results[system]["p99"] / results["drain"]["p99"]
                    label = f"{LABELS[system]} / bare drain, finished p99, {n} {kind}"
                    ratios.append({"label": label, "value": value, "note": ""})
                    print(f"  {label}: {value:.2f}")
            if "ours" in results and "redbeat" in results:
                value = results["ours"]["p99"] / results["redbeat"]["p99"]
                label = f"django-cluster-cron / celery-redbeat, finished p99, {n} {kind}"
                ratios.append({"label": label, "value": value, "note": ""})
                print(f"  {label}: {value:.2f}")
                targets.append(
                    {
                        "target": f"{n} {kind}: ours' p99 below celery-redbeat's",
                        "met": value < 1,
                        "figure": f"{value:.2f} x",
                    }
                )
            if "pieces" in results and "ours" in results:
                value = results["pieces"]["p99"] / results["ours"]["p99"]
                label = f"one job of {n} pieces / {n} separate jobs, finished p99, {kind}"
                ratios.append({"label": label, "value": value, "note": ""})
                print(f"  {label}: {value:.2f}")
                if n == 10_000:
                    targets.append(
                        {
                            "target": f"{n} {kind}: a slot of N pieces within 1.2 x N jobs",
                            "met": value <= 1.2,
                            "figure": f"{value:.2f} x",
                        }
                    )
            if n == 10_000 and "ours" in results and "drain" in results:
                value = results["ours"]["p99"] / results["drain"]["p99"]
                targets.append(
                    {
                        "target": f"{n} {kind}: ours' p99 within 1.3 x the bare drain's",
                        "met": value <= 1.3,
                        "figure": f"{value:.2f} x",
                    }
                )
    write_json(
        args.json,
        {
            "workload": "end_to_end",
            "title": "End to end: fire time to the job's code finished, one burst, same worker",
            "description": " ".join(__doc__.split("\n\n")[2].split()),
            "rows": rows,
            "ratios": ratios,
            "targets": targets,
        },
    )


if __name__ == "__main__":
    main()
