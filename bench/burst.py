"""Burst: N slots due at the same instant: time until all N messages are in the broker.

    .venv/bin/python bench/burst.py [--sizes ...] [--reps 3] [--quick] [--cap 120] [--json PATH]

Every system gets N jobs with the same daily cron whose slot is the minute just past and whose
last run is one second before it, so each owes exactly one slot. The scheduler is built first
(not timed; start-up is measured by idle_tick), then timed from its first tick until LLEN of the
queue is N (ours: and N JobRun rows ``queued``, checked). The physical-limit proxy: N bare kombu
publishes of a message equal to ours (same body, headers and properties; a fresh id each) to the
same Redis broker and queue with one producer, in the same repetition. A peer that does not
finish within --cap seconds is reported as a lower bound and not run at larger N.
Target: ours at N=10,000 at >= 50% of the bare publish rate.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import _peers as peers
from _env import boot
from _report import Report, parser, sizes_and_reps

DESCRIPTION = (
    "N jobs with one daily cron (M H * * *, M H = the minute just past; last run 1 s before), "
    "so each owes one slot. Timed from the scheduler's first tick until LLEN(queue) = N. Ours: "
    "Scheduler.step() (batches of BATCH_SIZE=500: plan, insert JobRuns, publish, mark queued), "
    "also checked: N JobRun rows queued. DatabaseScheduler: celery beat's loop (tick() + sync "
    "check), which sends one entry per tick. redbeat: RedBeatScheduler.tick(). kombu (bare "
    "publish): N Producer.publish() calls of a message equal to ours (pre-serialized body, same "
    "headers/properties, fresh id), one producer, same broker and queue: the physical-limit "
    "proxy. Rates are N / time. Set-up (creating N due jobs) is reported too."
)


def sample_message() -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Body, headers and properties of one message exactly as our dispatcher sends it."""
    from django_cluster_cron.dispatch.celery import CeleryDispatcher
    from django_cluster_cron.ledger.outbox import OutboxMessage

    message = OutboxMessage(
        run_id=123456,
        task_id=str(uuid.uuid4()),
        job_id=123456,
        scheduled_for=peers.now(),
        attempt=1,
        epoch=1,
        trigger="schedule",
        queue=None,
        priority=None,
        expires=None,
    )
    peers.clear_queue()
    CeleryDispatcher(peers.celery_app()).publish([message])
    raw = json.loads(peers.redis_client().lpop(peers.QUEUE))
    peers.clear_queue()
    properties = dict(raw["properties"])
    properties.pop("body_encoding", None)
    properties.pop("delivery_tag", None)
    properties.pop("delivery_info", None)
    import base64

    body = base64.b64decode(raw["body"]).decode()
    return body, raw["headers"], properties


def bare_publish(n: int, sample: tuple[str, dict[str, Any], dict[str, Any]]) -> float:
    body, headers, properties = sample
    app = peers.celery_app()
    peers.clear_queue()
    with app.connection_for_write() as connection:
        producer = connection.Producer()
        started = time.perf_counter()
        for _ in range(n):
            task_id = str(uuid.uuid4())
            producer.publish(
                body,
                exchange="",
                routing_key=peers.QUEUE,
                headers={**headers, "id": task_id, "root_id": task_id},
                content_type="application/json",
                content_encoding="utf-8",
                correlation_id=task_id,
                **{k: v for k, v in properties.items() if k not in {"correlation_id"}},
            )
        seconds = time.perf_counter() - started
    if peers.queue_length() != n:
        raise SystemExit(f"bare publish: {peers.queue_length()} messages in the queue, not {n}")
    return seconds


def burst_ours(n: int, cap: float) -> tuple[float, bool, str]:
    from django_cluster_cron.models import JobRun

    peers.clear_queue()
    scheduler = peers.build_ours(f"burst-{n}")
    try:
        seconds, done = peers.wait_for_queue(n, cap, scheduler.step)
    finally:
        scheduler.shutdown()
    queued = JobRun.objects.filter(status="queued").count()
    if done and queued != n:
        raise SystemExit(f"ours: {n} messages in the broker but {queued} JobRuns queued")
    return seconds, done, ""


def burst_peer(n: int, cap: float, build: Any, step: Any) -> tuple[float, bool, str]:
    peers.clear_queue()
    scheduler = build()
    try:
        seconds, done = peers.wait_for_queue(n, cap, lambda: step(scheduler))
    finally:
        peers.close_scheduler(scheduler)
    sent = peers.queue_length()
    return seconds, done, "" if done else f"{sent:,} of {n:,} sent when capped at {cap:g} s"


def main() -> None:
    cli = parser(__doc__ or "", reps=3)
    cli.add_argument(
        "--ours-only", action="store_true", help="ours and the bare kombu publishes, no peers"
    )
    args = cli.parse_args()
    sizes, reps = sizes_and_reps(args)
    cap = args.cap or (20.0 if args.quick else 120.0)
    boot()
    peers.quiet()
    report = Report("burst", "Burst: N slots due at once", DESCRIPTION)
    sample = sample_message()
    systems: dict[str, Any] = {
        "ours": (peers.setup_ours, peers.clear_ours, burst_ours),
        "django-celery-beat": (
            peers.setup_beat,
            peers.clear_beat,
            lambda n, c: burst_peer(n, c, peers.build_beat, peers.beat_step),
        ),
        "celery-redbeat": (
            peers.setup_redbeat,
            peers.clear_redbeat,
            lambda n, c: burst_peer(n, c, peers.build_redbeat, lambda s: s.tick()),
        ),
    }
    if args.ours_only:
        systems = {"ours": systems["ours"]}
    capped_at: dict[str, int] = {}
    for n in sizes:
        times: dict[str, list[float]] = {name: [] for name in [*systems, "kombu"]}
        setups: dict[str, list[float]] = {name: [] for name in systems}
        notes: dict[str, str] = {}
        for _ in range(reps):
            times["kombu"].append(bare_publish(n, sample))
            for name, (setup, clear, run) in systems.items():
                if name in capped_at:
                    continue
                cron, _slot = peers.due_cron()
                setups[name].append(setup(n, cron))
                seconds, done, note = run(n, cap)
                clear()
                times[name].append(seconds)
                if not done:
                    capped_at[name] = n
                    notes[name] = f"lower bound: {note}"
        peers.clear_queue()
        kombu = report.row(
            "kombu (bare publish)", n, "time to all N in broker", "s", times["kombu"]
        )
        report.row("kombu (bare publish)", n, "rate", "msg/s", [n / t for t in times["kombu"]])
        medians: dict[str, float] = {}
        for name in systems:
            if not times[name]:
                report.row(
                    name,
                    n,
                    "time to all N in broker",
                    "s",
                    [cap],
                    note=f"> {cap:g} s: not run, already capped at N={capped_at[name]:,}",
                )
                continue
            report.row(name, n, "set-up: create N due jobs", "s", setups[name])
            medians[name] = report.row(
                name, n, "time to all N in broker", "s", times[name], note=notes.get(name, "")
            )["median"]
            report.row(
                name,
                n,
                "rate",
                "msg/s",
                [n / t for t in times[name]],
                note="upper bound (capped)" if name in notes else "",
            )
        ours = medians["ours"]
        report.ratio(
            f"ours / kombu limit (rate), N={n:,}",
            kombu["median"] / ours,
            "share of the bare publish rate",
        )
        for peer in ("django-celery-beat", "celery-redbeat"):
            if peer in medians:
                report.ratio(
                    f"{peer} time / ours time, N={n:,}",
                    medians[peer] / ours,
                    "lower bound (capped)" if peer in notes else "",
                )
        if n == 10_000 or (n == sizes[-1] and 10_000 not in sizes):
            share = kombu["median"] / ours
            report.target(
                f"Burst: N={n:,} at >= 50% of bare publish rate",
                share >= 0.5,
                f"{share:.0%} of the bare rate ({n / ours:,.0f} vs {n / kombu['median']:,.0f} "
                "msg/s)",
            )
    report.write(args.json)


if __name__ == "__main__":
    main()
