"""Memory: peak RSS of the real scheduler process at each N (idle, and through a burst of N).

    .venv/bin/python bench/memory.py [--sizes ...] [--reps 1] [--quick] [--cap 120] [--json PATH]

Each system runs as its own process, started the way its users start it: ours
``python -m django run_scheduler``; DatabaseScheduler ``celery -A tests.testapp.celery:app beat
-S django_celery_beat.schedulers:DatabaseScheduler``; redbeat the same with
``-S redbeat.RedBeatScheduler``. Idle: N jobs none due, the process runs for a few seconds (it has
loaded and ticked), then its VmHWM (peak RSS, /proc/<pid>/status) is read. Burst: N jobs each
owing one slot; VmHWM once all N messages are in the broker (or at --cap). Ours only, "ahead":
N jobs due together at a second still to come, so the scheduler records all N ahead
and holds their built messages until then (LOOKAHEAD_RUNS bounds them); VmHWM once all N are
in the broker. Target: ours flat in N, idle and through a burst; recorded ahead, the
memory held is bounded by LOOKAHEAD_RUNS, not by N (reported per run held).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta

import _peers as peers
from _env import ROOT, boot
from _report import Report, parser, sizes_and_reps

DESCRIPTION = (
    "Peak RSS (VmHWM from /proc/<pid>/status) of each system's real scheduler process: ours "
    "'manage.py run_scheduler', DatabaseScheduler and redbeat 'celery beat -S ...', against the "
    "same database and Redis. Idle: N jobs none due, read after the process has run a few "
    "seconds (loaded and ticked). Burst: N jobs each owing one slot, read when all N messages "
    "are in the broker (or at the cap)."
)

CELERY = [sys.executable, "-m", "celery", "-A", "tests.testapp.celery:app", "beat"]
COMMANDS = {
    "ours": [sys.executable, "-m", "django", "run_scheduler", "--log-level", "WARNING"],
    "django-celery-beat": [
        *CELERY,
        "-S",
        "django_celery_beat.schedulers:DatabaseScheduler",
        "--loglevel",
        "WARNING",
    ],
    "celery-redbeat": [*CELERY, "-S", "redbeat.RedBeatScheduler", "--loglevel", "WARNING"],
}
SETUP: dict[str, tuple[Callable[[int, str], float], Callable[[], None]]] = {
    "ours": (peers.setup_ours, peers.clear_ours),
    "django-celery-beat": (peers.setup_beat, peers.clear_beat),
    "celery-redbeat": (peers.setup_redbeat, peers.clear_redbeat),
}


def vm_hwm_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def run_process(
    system: str, n: int, wait: float, cap: float, until_sent: bool
) -> tuple[float, str]:
    """Start the scheduler; return its peak RSS after ``wait`` s or once N messages are sent."""
    peers.clear_queue()
    process = subprocess.Popen(
        COMMANDS[system],
        env=dict(os.environ),  # redbeat falls back to the broker URL: the same Redis
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    note = ""
    try:
        started = time.monotonic()
        while time.monotonic() - started < (cap if until_sent else wait):
            if process.poll() is not None:
                raise SystemExit(f"{system} exited early: {process.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            if until_sent and peers.queue_length() >= n:
                break
            time.sleep(0.1)
        else:
            if until_sent:
                note = f"{peers.queue_length():,} of {n:,} sent at the {cap:g} s cap"
        peak = vm_hwm_mib(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return peak, note


def setup_ahead(n: int) -> float:
    """N jobs due together at a second 15 s and N/2000 s away (a six-field cron: they are
    recorded ahead, LOOKAHEAD 60 s before it); returns how long until then."""
    from django_cluster_cron.models import JobDefinition

    lead = max(15.0, n / 2000)
    slot = (peers.now() + timedelta(seconds=lead + 1)).replace(microsecond=0)
    peers.setup_ours(n, f"{slot.minute} {slot.hour} * * * {slot.second}")
    JobDefinition.objects.update(last_scheduled_at=peers.now(), next_run_at=slot)
    return (slot - peers.now()).total_seconds()


def main() -> None:
    cli = parser(__doc__ or "", reps=1)
    cli.add_argument("--ours-only", action="store_true", help="ours alone, no peers")
    args = cli.parse_args()
    sizes, reps = sizes_and_reps(args)
    cap = args.cap or (20.0 if args.quick else 120.0)
    wait = 3.0 if args.quick else 6.0
    boot()
    peers.quiet()
    report = Report("memory", "Memory: peak RSS of the scheduler process", DESCRIPTION)
    peaks: dict[tuple[str, str, int], float] = {}
    systems = {"ours": SETUP["ours"]} if args.ours_only else SETUP
    for n in sizes:
        for system, (setup, clear) in systems.items():
            for phase in ("idle", "burst"):
                values, notes = [], []
                for _ in range(reps):
                    cron = peers.IDLE if phase == "idle" else peers.due_cron()[0]
                    setup(n, cron)
                    peak, note = run_process(system, n, wait, cap, until_sent=phase == "burst")
                    clear()
                    values.append(peak)
                    if note:
                        notes.append(note)
                row = report.row(
                    system,
                    n,
                    f"peak RSS, {phase}",
                    "MiB",
                    values,
                    note="; ".join(notes),
                )
                peaks[system, phase, n] = row["median"]
        values, notes = [], []
        for _ in range(reps):
            until = setup_ahead(n)
            peak, note = run_process("ours", n, wait, until + cap, until_sent=True)
            peers.clear_ours()
            values.append(peak)
            if note:
                notes.append(note)
        row = report.row("ours", n, "peak RSS, ahead", "MiB", values, note="; ".join(notes))
        peaks["ours", "ahead", n] = row["median"]
    peers.clear_queue()
    small, large = sizes[0], sizes[-1]
    for system in systems:
        for phase in ("idle", "burst"):
            report.ratio(
                f"{system}: peak RSS {phase} N={large:,} / N={small:,}",
                peaks[system, phase, large] / peaks[system, phase, small],
            )
    for phase in ("idle", "burst"):
        for peer in [p for p in ("django-celery-beat", "celery-redbeat") if p in systems]:
            report.ratio(
                f"{peer} / ours, peak RSS {phase}, N={large:,}",
                peaks[peer, phase, large] / peaks["ours", phase, large],
            )
    report.ratio(
        f"ours: peak RSS ahead N={large:,} / N={small:,}",
        peaks["ours", "ahead", large] / peaks["ours", "ahead", small],
    )
    growth = max(
        peaks["ours", phase, large] - peaks["ours", phase, small] for phase in ("idle", "burst")
    )
    # "Flat": within 10 MiB or 10% of the smallest size (allocator noise), whichever is larger.
    flat = growth <= max(10.0, 0.1 * peaks["ours", "idle", small])
    report.target(
        "Memory: scheduler RSS flat in N",
        flat,
        f"+{growth:.1f} MiB from N={small:,} to N={large:,} (idle "
        f"{peaks['ours', 'idle', small]:.0f} -> {peaks['ours', 'idle', large]:.0f} MiB, burst "
        f"{peaks['ours', 'burst', small]:.0f} -> {peaks['ours', 'burst', large]:.0f} MiB)",
    )
    # Not flat by design, but bounded: the leader holds at most LOOKAHEAD_RUNS runs recorded
    # ahead (about 100 bytes each) and unpacks one slice of them at a time at the instant.
    from django_cluster_cron.conf import app_settings

    budget = app_settings.LOOKAHEAD_RUNS
    held = min(large, budget)
    extra = peaks["ours", "ahead", large] - peaks["ours", "ahead", small]
    report.ratio(
        f"ours: recorded ahead, extra peak RSS per run held (N={large:,}, budget {budget:,})",
        extra * 1024 * 1024 / held,
        "bytes; the look-ahead holds at most LOOKAHEAD_RUNS runs, whatever N",
    )
    report.write(args.json)


if __name__ == "__main__":
    main()
