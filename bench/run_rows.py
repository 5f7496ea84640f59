"""Run rows per second: what the leader and the workers ask of the database for each run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/run_rows.py
        [--sizes 10000] [--reps 3] [--threads 1 4] [--quick] [--json PATH]

Past one leader (docs/explanation/scaling.md) the bound is the database's rate for run rows,
which every leader and every worker shares. For N jobs due at once, each repetition times, on
the database DATABASE_URL names (default: a fresh SQLite file):

* record: the leader's ``Recorder.schedule_due`` in batches of BATCH_SIZE until nothing is due
  (one fenced transaction a batch: lock the jobs, plan, insert the run rows in one statement,
  advance the jobs, read the rows back), in run rows per second;
* queued: the leader's ``mark_published`` of those runs, a batch at a time (one fenced UPDATE a
  batch), in rows per second;
* claim + finish: the worker's two committed statements per run (``claim_run`` and
  ``finish_run``, as ``execute_run`` makes them), from T threads with a connection each, in runs
  per second (SQLite: one thread, it has one writer).

No broker and no Celery: publishing is ``burst.py``'s subject, the task body
``run_overhead.py``'s.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import _peers as peers
from _env import boot
from _report import Report, parser, sizes_and_reps

DESCRIPTION = (
    "N jobs due at once (one daily cron whose slot is the minute just past). record: "
    "Recorder.schedule_due batches of BATCH_SIZE until none is due (lock, plan, insert the run "
    "rows, advance the jobs, read back), N / time. queued: mark_published of the N runs in "
    "batches of BATCH_SIZE under the epoch, N / time. claim + finish: claim_run then finish_run "
    "(status success) per run, each its own committed statement, from T threads with their own "
    "connections, N / time. The database only: no broker, no task body."
)


def leader() -> tuple[object, object]:
    from django_cluster_cron.ledger.fence import Fence
    from django_cluster_cron.scheduler.recording import Recorder

    return Recorder(), Fence.claim("bench", uuid.uuid4().hex)


def record(store: object, fence: object, batch: int) -> list[object]:
    """Every due job's run, recorded batch by batch; the messages to publish."""
    from django_cluster_cron.dbtime import database_now

    messages: list[object] = []
    while True:
        found = store.schedule_due(  # type: ignore[attr-defined]
            now=database_now(), fence=fence, node_id="bench", limit=batch
        )
        messages.extend(found.messages)
        if found.jobs < batch:
            return messages


def mark_queued(fence: object, messages: list[object], batch: int) -> None:
    from django_cluster_cron.dbtime import database_now
    from django_cluster_cron.ledger.outbox import mark_published

    for start in range(0, len(messages), batch):
        mark_published(
            messages[start : start + batch],  # type: ignore[arg-type]
            now=database_now(),
            fence=fence,  # type: ignore[arg-type]
            node_id="bench",
        )


def claim_and_finish(runs: list[tuple[int, str]], threads: int) -> int:
    """Each run claimed and finished by one of ``threads`` threads; the runs finished."""
    from django.db import connections

    from django_cluster_cron.ledger.statements import claim_run, finish_run

    done = [0] * threads
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for run_id, task_id in runs[index::threads]:
                run = claim_run(run_id, task_id, 1, f"bench-{index}")
                if run is None:
                    raise RuntimeError(f"run {run_id} could not be claimed")
                done[index] += finish_run(
                    run_id,
                    1,
                    {
                        "status": "success",
                        "result": "3",
                        "error": "",
                        "duration": timedelta(milliseconds=1),
                    },
                )
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    return sum(done)


def main() -> None:
    cli = parser(__doc__, reps=3)
    cli.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    args = cli.parse_args()
    sizes, reps = sizes_and_reps(args)
    if not args.sizes:
        sizes = [1_000] if args.quick else [10_000]
    boot()
    peers.quiet()
    from django.db import connection

    from django_cluster_cron.conf import app_settings
    from django_cluster_cron.models import JobRun

    batch = app_settings.BATCH_SIZE
    threads = [1] if connection.vendor == "sqlite" else sorted(set(args.threads))
    report = Report("run_rows", f"Run rows per second on {connection.vendor}", DESCRIPTION)
    for n in sizes:
        recorded: list[float] = []
        queued: list[float] = []
        finished: dict[int, list[float]] = {t: [] for t in threads}
        for _ in range(reps):
            for t in threads:
                cron, _slot = peers.due_cron()
                peers.setup_ours(n, cron)
                store, fence = leader()
                started = time.perf_counter()
                messages = record(store, fence, batch)
                took = time.perf_counter() - started
                if len(messages) != n:
                    raise SystemExit(f"recorded {len(messages)} runs for {n} due jobs")
                recorded.append(n / took)
                started = time.perf_counter()
                mark_queued(fence, messages, batch)
                queued.append(n / (time.perf_counter() - started))
                runs = list(JobRun.objects.values_list("pk", "task_id"))
                started = time.perf_counter()
                done = claim_and_finish(runs, t)
                took = time.perf_counter() - started
                if done != n or JobRun.objects.filter(status="success").count() != n:
                    raise SystemExit(f"{done} of {n} runs finished")
                finished[t].append(n / took)
        report.row("ours", n, "record (leader, batched)", "runs/s", recorded)
        report.row("ours", n, "mark queued (leader, batched)", "rows/s", queued)
        for t in threads:
            report.row(
                "ours", n, "claim + finish (worker)", "runs/s", finished[t], variant=f"{t} thr"
            )
    report.write(args.json)
    peers.clear_ours()


if __name__ == "__main__":
    main()
