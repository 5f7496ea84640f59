"""Idle tick: N jobs, none due: the time and the cost of one scheduler tick, ours vs the peers.

    .venv/bin/python bench/idle_tick.py [--sizes 100 1000 10000 100000] [--reps 50] [--quick]
        [--json PATH]

For each N and each system: create N equal jobs none of which is due (``0 * 1 1 *``), start the
scheduler (timed: DatabaseScheduler reads the whole schedule here), run one tick to settle, count
the SQL queries (and for redbeat the Redis commands) of one tick, then time ``--reps`` ticks.
Ours is ``Scheduler.step()`` as leader, with the Redis lease and with the database lease (whose
renewal, an UPDATE every TTL/3, lands in some ticks); DatabaseScheduler is one pass of celery
beat's loop (``tick()`` + its sync check); redbeat is ``RedBeatScheduler.tick()`` holding its lock.
Target: constant queries, ours at the largest N within 2x of N=100.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import _peers as peers
from _env import boot
from _report import Report, parser, sizes_and_reps

DESCRIPTION = (
    "N jobs with the same cron (0 * 1 1 *: hour field '*', not due during the run). "
    "'set-up' is creating the N jobs (bulk insert for ours and DatabaseScheduler, one "
    "RedBeatSchedulerEntry.save() each for redbeat, its API); 'start-up' is building the "
    "scheduler and its first tick (DatabaseScheduler reads every job here). Then one tick: ours "
    "= Scheduler.step() as leader; DatabaseScheduler = tick() + sync check of celery beat's "
    "loop; redbeat = tick() holding its lock. Queries are SQL statements seen by an execute "
    "wrapper; redbeat's cost is Redis commands (server's total_commands_processed). Time is the "
    "median of --reps ticks."
)


def measure(
    report: Report,
    system: str,
    n: int,
    reps: int,
    setup: Callable[[], float],
    build: Callable[[], Any],
    tick: Callable[[Any], Any],
    close: Callable[[Any], None],
) -> float:
    from tests.support.querycount import count_queries

    report.row(system, n, "set-up: create N jobs", "s", [setup()])
    started = time.perf_counter()
    scheduler = build()
    tick(scheduler)  # lease / initial read / heap
    report.row(system, n, "start-up: build + first tick", "s", [time.perf_counter() - started])
    try:
        before = peers.redis_commands()
        with count_queries() as log:
            tick(scheduler)
        commands = peers.redis_commands() - before - 1  # less the second INFO itself
        report.row(system, n, "SQL queries per idle tick", "queries", [len(log)])
        report.row(system, n, "Redis commands per idle tick", "count", [commands])
        timings = []
        for _ in range(reps):
            started = time.perf_counter()
            tick(scheduler)
            timings.append((time.perf_counter() - started) * 1000)
    finally:
        close(scheduler)
    return report.row(system, n, "idle tick time", "ms", timings)["median"]


def main() -> None:
    cli = parser(__doc__ or "", reps=50)
    cli.add_argument("--ours-only", action="store_true", help="ours, both lease backends")
    args = cli.parse_args()
    sizes, reps = sizes_and_reps(args)
    reps = max(reps, 5)  # a tick is short: always time several
    boot()
    peers.quiet()
    report = Report("idle_tick", "Idle tick: N jobs, none due", DESCRIPTION)
    medians: dict[tuple[str, int], float] = {}
    for n in sizes:
        medians["ours", n] = measure(
            report,
            "ours",
            n,
            reps,
            lambda n=n: peers.setup_ours(n, peers.IDLE),
            lambda n=n: peers.build_ours(f"idle-{n}"),
            lambda s: s.step(),
            lambda s: s.shutdown(),
        )
        peers.clear_ours()
        medians["ours, database lease", n] = measure(
            report,
            "ours, database lease",
            n,
            reps,
            lambda n=n: peers.setup_ours(n, peers.IDLE),
            lambda n=n: peers.build_ours(f"idle-db-{n}", lease="database"),
            lambda s: s.step(),
            lambda s: s.shutdown(),
        )
        peers.clear_ours()
        if args.ours_only:
            continue
        medians["django-celery-beat", n] = measure(
            report,
            "django-celery-beat",
            n,
            reps,
            lambda n=n: peers.setup_beat(n, peers.IDLE),
            peers.build_beat,
            peers.beat_step,
            peers.close_scheduler,
        )
        peers.clear_beat()
        medians["celery-redbeat", n] = measure(
            report,
            "celery-redbeat",
            n,
            reps,
            lambda n=n: peers.setup_redbeat(n, peers.IDLE),
            peers.build_redbeat,
            lambda s: s.tick(),
            peers.close_scheduler,
        )
        peers.clear_redbeat()
        for peer in ("django-celery-beat", "celery-redbeat"):
            report.ratio(
                f"{peer} / ours, idle tick time, N={n:,}", medians[peer, n] / medians["ours", n]
            )

    small, large = sizes[0], sizes[-1]
    systems = ["ours", "ours, database lease"]
    if not args.ours_only:
        systems += ["django-celery-beat", "celery-redbeat"]
    for system in systems:
        report.ratio(
            f"{system}: tick time N={large:,} / N={small:,}",
            medians[system, large] / medians[system, small],
        )
    for system in ("ours", "ours, database lease"):
        queries = {report.find(system, "SQL queries per idle tick", n)["median"] for n in sizes}  # type: ignore[index]
        report.target(
            f"Idle tick: constant SQL queries per tick ({system})",
            len(queries) == 1,
            f"{', '.join(f'{q:g}' for q in sorted(queries))} per tick at N="
            + ", ".join(f"{n:,}" for n in sizes),
        )
    growth = medians["ours", large] / medians["ours", small]
    report.target(
        f"Idle tick: time at N={large:,} within 2x of N={small:,}",
        growth <= 2.0,
        f"{growth:.2f}x ({medians['ours', small]:.3f} ms -> {medians['ours', large]:.3f} ms)",
    )
    report.write(args.json)


if __name__ == "__main__":
    main()
