"""Failover and duplicates: ours vs celery-redbeat vs django-celery-beat, seen from the broker.

    .venv/bin/python bench/failover.py [--reps 3] [--quick] [--json PATH]

Failover: two schedulers of one system run an every-second job (ours: cron `* * * * * *`;
redbeat: a 1 s interval entry, since celery's crontab has no seconds); once the leader has
published, its process gets SIGKILL or SIGTERM; the gap is from the signal to the first message
that lands in the broker from another process (celery's `origin` header names the sender's
pid). Variants: ours TTL 10 s / poll 1 s (defaults) and TTL 2 s / poll 1 s, each with the Redis
lease and with the database lease (same run, same database and broker); redbeat
as shipped (lock timeout 5 x beat_max_loop_interval = 1500 s, the standby retries the lock every
beat_max_loop_interval = 300 s) with the wait capped (a lower bound), and redbeat tuned
(redbeat_lock_timeout 10 s, beat_max_loop_interval 1 s). DatabaseScheduler has no failover.

Duplicates: K every-minute jobs (`* * * * *`, the same crontab for every system) for W minute
boundaries, 3 of our `run_scheduler`, 2 DatabaseSchedulers and 2 redbeats side by side, all
publishing to one broker; distinct task ids and messages per (job, slot) are counted
(1 = exactly once; ours' extra messages are outbox re-publishes of the same task id). The
redbeat failover rounds run during this window (other keys, other args); ours run after it.
Targets: SIGKILL <= TTL + 1 s, SIGTERM <= 2 s.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import time
from datetime import datetime, timedelta
from typing import Any

import _procs
import redis
from _env import boot
from _procs import Arrival, BrokerWatch, row

SIGNALS = (("SIGKILL", signal.SIGKILL), ("SIGTERM", signal.SIGTERM))
REDBEAT_TUNED = {"redbeat_lock_timeout": 10, "beat_max_loop_interval": 1}
REDBEAT_DEFAULT_LOCK = 1500  # 5 x celery's default beat_max_loop_interval (300 s)


def is_ours(a: Arrival) -> bool:
    return "cluster_cron_job" in a.headers


def redbeat_failover(a: Arrival) -> bool:
    return a.args[:1] == ["redbeat-failover"]


class Rounds:
    """Leader/standby rounds of one system variant; gaps in seconds (None = capped)."""

    def __init__(self, watch: BrokerWatch, start: Any, match: Any, cap: float) -> None:
        self.watch, self.start, self.match, self.cap = watch, start, match, cap

    def one(self, name: str, sig: int) -> float | None:
        mark = self.watch.count()
        leader = self.start(f"{name}-a")
        first = self.watch.wait_for(self.match, 60, since=mark)
        if first is None:
            raise SystemExit(f"{name}: the leader published nothing within 60 s")
        standby = self.start(f"{name}-b")
        time.sleep(3)  # the standby is up and has tried the lock once
        mark = self.watch.count()
        signalled = time.time()
        leader.send_signal(sig)
        leader_origin = f"gen{leader.pid}@"  # celery's `origin` header names the sender's pid

        def takeover(a: Arrival) -> bool:
            origin = str(a.headers.get("origin", ""))
            return self.match(a) and not origin.startswith(leader_origin)

        next_one = self.watch.wait_for(takeover, self.cap, since=mark)
        _procs.stop(standby)
        leader.wait(30)
        return None if next_one is None else next_one.at - signalled


def failover_rows(
    system: str,
    variant: str,
    rounds: Rounds,
    reps: int,
    target: dict[str, float],
    cause: str = "",
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    rows, medians = [], {}
    for how, sig in SIGNALS:
        gaps = []
        for rep in range(reps):
            gap = rounds.one(f"{system}-{how}-{rep}".replace(" ", ""), sig)
            gaps.append(rounds.cap if gap is None else gap)
            shown = f"> {rounds.cap:g} s (capped)" if gap is None else f"{gap:.2f} s"
            print(f"  {system:<15} {variant:<55} {how} round {rep + 1}: {shown}", flush=True)
        capped = sum(g >= rounds.cap for g in gaps)
        note = f"> {rounds.cap:g} s, capped: {capped} of {reps} rounds hit the cap ({cause})"
        note = note if capped else ""
        if how in target:
            note = (note + "; " if note else "") + f"target <= {target[how]:g} s"
        rows.append(row(system, variant, None, f"{how} to next dispatch", "s", gaps, note))
        medians[how] = rows[-1]["median"]
    return rows, medians


class Duplicates:
    """K every-minute jobs, several schedulers per system side by side, for W boundaries."""

    def __init__(self, env: dict[str, str], watch: BrokerWatch, jobs: int, minutes: int) -> None:
        self.env, self.watch, self.jobs, self.minutes = env, watch, jobs, minutes

    def start(self) -> None:
        from _peerapp import app
        from celery.schedules import crontab
        from django.utils import timezone
        from django_celery_beat.models import CrontabSchedule, PeriodicTask
        from redbeat import RedBeatSchedulerEntry

        from django_cluster_cron.models import JobDefinition

        now = timezone.now()
        JobDefinition.objects.bulk_create(
            JobDefinition(
                name=f"dup-{k}",
                cron="* * * * *",
                timezone="UTC",
                task="tests.echo",
                args=["ours", k],
                last_scheduled_at=now,
                next_run_at=now.replace(second=0, microsecond=0) + timedelta(minutes=1),
            )
            for k in range(self.jobs)
        )
        every_minute = CrontabSchedule.objects.create(minute="*", timezone="UTC")
        PeriodicTask.objects.bulk_create(
            PeriodicTask(
                name=f"dup-{k}",
                task="tests.echo",
                crontab=every_minute,
                args=f'["beat", {k}]',
                last_run_at=now,
            )
            for k in range(self.jobs)
        )
        dup_conf = {"redbeat_key_prefix": "dup:"}
        app.conf.update(dup_conf)
        app.__dict__.pop("redbeat_conf", None)  # redbeat caches its settings on the app
        for k in range(self.jobs):
            RedBeatSchedulerEntry(
                f"dup-{k}", "tests.echo", crontab(), args=["redbeat", k], app=app, last_run_at=now
            ).save()
        started = time.time()
        self.procs = [_procs.start_ours(self.env, f"dup-ours-{i}") for i in range(3)]
        self.procs += [
            _procs.start_beat(self.env, _procs.DATABASE_SCHEDULER, f"dup-beat-{i}") for i in (0, 1)
        ]
        self.procs += [
            _procs.start_beat(self.env, _procs.REDBEAT_SCHEDULER, f"dup-redbeat-{i}", dup_conf)
            for i in (0, 1)
        ]
        self.first = math.ceil((started + 10) / 60) * 60  # every process is up by then
        self.last = self.first + 60 * (self.minutes - 1)
        self.end = self.last + 15

    def finish(self) -> list[dict[str, Any]]:
        """Per (job, slot): messages, and distinct task ids (the copies that can each execute:
        ours re-publishes an unclaimed run after OUTBOX_REPUBLISH_AFTER with the same id, and
        no worker claims here, so our extra messages are that outbox, dropped by the claim)."""
        time.sleep(max(0.0, self.end - time.time()))
        for proc in self.procs:
            _procs.stop(proc)
        ids: dict[tuple[str, int, float], list[str]] = {}
        for a in self.watch.arrivals():
            if not self.first <= a.at < self.end:
                continue
            if is_ours(a):
                job = int(a.headers["cluster_cron_job"])
                slot = datetime.fromisoformat(a.headers["cluster_cron_slot"]).timestamp()
                ids.setdefault(("ours", job, slot), []).append(a.headers["id"])
            elif a.args and a.args[0] in ("beat", "redbeat") and len(a.args) == 2:
                ids.setdefault((a.args[0], a.args[1], a.at // 60 * 60), []).append(a.headers["id"])
        from django.db.models import Count

        from django_cluster_cron.models import JobRun

        most_runs = JobRun.objects.values("job", "scheduled_for").annotate(n=Count("id"))
        runs_per_slot = max((r["n"] for r in most_runs), default=0)
        rows = []
        names = {"ours": "ours", "beat": "django-celery-beat", "redbeat": "celery-redbeat"}
        copies = {"ours": 3, "beat": 2, "redbeat": 2}
        slots = [self.first + 60 * i for i in range(self.minutes)]
        for key, system in names.items():
            jobs = sorted({job for (s, job, _slot) in ids if s == key})
            seen = [ids.get((key, job, slot), []) for job in jobs for slot in slots]
            seen += [[]] * (self.jobs * self.minutes - len(seen))  # jobs never published
            messages = [float(len(m)) for m in seen]
            distinct = [float(len(set(m))) for m in seen]
            variant = f"{copies[key]} schedulers side by side"
            lost = sum(not m for m in seen)
            extra = sum(max(0.0, c - 1) for c in distinct)
            note = f"{self.jobs} jobs x {self.minutes} slots; {extra:g} duplicate, {lost} lost"
            if key == "ours":
                republished = sum(messages) - sum(distinct)
                note += (
                    f"; {republished:g} outbox re-publishes of the same task id (no worker "
                    f"claims in this test); at most {runs_per_slot} JobRun per (job, slot)"
                )
            metric = "distinct task ids per (job, slot)"
            rows.append(row(system, variant, None, metric, "count", distinct, note))
            rows.append(row(system, variant, None, "messages per (job, slot)", "count", messages))
            print(f"  {system:<18} {variant:<28} {note}")
        return rows


def save_failover_entry(app: Any) -> None:
    """redbeat's every-second entry that both failover measurements watch."""
    from redbeat import RedBeatSchedulerEntry

    RedBeatSchedulerEntry(
        "failover-tick",
        "tests.echo",
        timedelta(seconds=1),
        args=["redbeat-failover"],
        app=app,
        last_run_at=app.now(),
    ).save()


def redbeat_default_uncapped(
    env: dict[str, str], watch: BrokerWatch, client: redis.Redis, path: str | None
) -> None:
    """The real thing once per signal: redbeat as shipped, wait until the standby sends."""
    from _peerapp import app

    save_failover_entry(app)
    client.delete("redbeat::lock")

    def start(name: str) -> Any:
        return _procs.start_beat(env, _procs.REDBEAT_SCHEDULER, name)

    cap = REDBEAT_DEFAULT_LOCK + 300 + 120  # lock expiry + one retry sleep + slack
    rounds = Rounds(watch, start, redbeat_failover, cap)
    rows, _medians = failover_rows("celery-redbeat", "default, uncapped", rounds, 1, {})
    watch.stop()
    _procs.write_json(
        path,
        {
            "workload": "failover-redbeat-default",
            "title": "celery-redbeat as shipped: one uncapped failover per signal",
            "description": "One round per signal, shipped defaults: after SIGKILL the standby "
            "waits for the 1500 s lock to expire, retrying every 300 s; after SIGTERM the lock "
            "is released but the standby sleeps up to 300 s before its next try. Gap from the "
            "signal to the standby's first message in the broker.",
            "rows": rows,
            "ratios": [],
            "targets": [],
        },
    )


def peers_rounds(
    env: dict[str, str],
    watch: BrokerWatch,
    client: Any,
    app: Any,
    args: argparse.Namespace,
    redbeat: dict[str, dict[str, float]],
) -> list[dict[str, Any]]:
    """The duplicates window, and redbeat's failover rounds while it runs."""
    rows: list[dict[str, Any]] = []
    print("Duplicates window started; redbeat failover rounds run meanwhile", flush=True)
    dup = Duplicates(env, watch, args.dup_jobs, args.dup_minutes)
    dup.start()

    app.conf.update({"redbeat_key_prefix": "redbeat:"})
    app.__dict__.pop("redbeat_conf", None)
    save_failover_entry(app)
    default_cause = (
        f"as shipped the lock lives {REDBEAT_DEFAULT_LOCK} s after SIGKILL and a standby retries "
        "it every 300 s, so takeover takes 1500-1800 s; after SIGTERM the lock is released but "
        "the standby sleeps up to 300 s before its next try"
    )
    default = f"default: lock timeout {REDBEAT_DEFAULT_LOCK} s, retry every 300 s"
    for variant, conf, cap, cause in (
        ("tuned: lock timeout 10 s, max loop interval 1 s", REDBEAT_TUNED, 60.0, "tuned"),
        (default, {}, args.cap, default_cause),
    ):

        def start(name: str, conf: dict[str, Any] = conf) -> Any:
            if name.endswith("-a"):  # a killed leader's lock would outlive its round
                client.delete("redbeat::lock")
            return _procs.start_beat(env, _procs.REDBEAT_SCHEDULER, name, conf)

        rounds = Rounds(watch, start, redbeat_failover, cap)
        part, redbeat[variant] = failover_rows(
            "celery-redbeat", variant, rounds, args.reps, {}, cause
        )
        rows += part
    rows += dup.finish()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", help="ignored: failover has no N")
    parser.add_argument("--reps", type=int, default=3, help="rounds per variant and signal")
    parser.add_argument("--quick", action="store_true", help="CI smoke run (about 2 minutes)")
    parser.add_argument("--json", help="write the results here (see bench/README.md)")
    parser.add_argument("--cap", type=float, default=40.0, help="wait cap for redbeat default")
    parser.add_argument(
        "--redbeat-default-only",
        action="store_true",
        help="one uncapped round per signal of redbeat as shipped (about 35 min), nothing else",
    )
    parser.add_argument(
        "--ours-only",
        action="store_true",
        help="only our failover rounds (both lease backends), no peers and no duplicates window",
    )
    parser.add_argument("--dup-jobs", type=int, default=10)
    parser.add_argument("--dup-minutes", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.reps, args.cap, args.dup_minutes = 1, 4.0, 1
    env = boot()
    url = os.environ["REDIS_URL"]
    _procs.clean(url)  # a previous run's peer rows would clash with this one's names
    watch = BrokerWatch(url).start()
    client = redis.Redis.from_url(url)

    from _peerapp import app

    from django_cluster_cron.models import JobDefinition, JobRun

    rows: list[dict[str, Any]] = []
    if args.redbeat_default_only:
        redbeat_default_uncapped(env, watch, client, args.json)
        return
    redbeat: dict[str, dict[str, float]] = {}
    if not args.ours_only:
        rows += peers_rounds(env, watch, client, app, args, redbeat)
    JobRun.objects.all().delete()
    JobDefinition.all_objects.all().delete()

    JobDefinition.objects.create(
        name="failover-tick", cron="* * * * * *", timezone="UTC", task="tests.add", args=[1, 2]
    )
    ours: dict[str, dict[str, float]] = {}
    ours_variants = [
        (ttl, 1.0, f"TTL {ttl:g} s, poll 1 s{' (default)' if ttl == 10 else ''}, {lease} lease")
        for ttl in ((2.0,) if args.quick else (10.0, 2.0))
        for lease in ("redis", "database")
    ]
    for ttl, poll, variant in ours_variants:
        lease = "database" if "database lease" in variant else "redis"

        def start_ours(name: str, ttl: float = ttl, poll: float = poll, lease: str = lease) -> Any:
            return _procs.start_ours(
                env, name, ttl=ttl, poll=poll, settings={"LEASE_BACKEND": lease}
            )

        target = {"SIGKILL": ttl + 1, "SIGTERM": 2.0}
        part, ours[variant] = failover_rows(
            "ours", variant, Rounds(watch, start_ours, is_ours, ttl * 3 + 10), args.reps, target
        )
        rows += part
    watch.stop()

    ratios, targets = [], []
    for variant, medians in ours.items():
        ttl = 10.0 if "10 s" in variant else 2.0
        if "database lease" in variant:
            redis_variant = variant.replace("database lease", "redis lease")
            for how in ("SIGKILL", "SIGTERM"):
                ratios.append(
                    {
                        "label": f"ours, database lease / Redis lease ({variant.split(',')[0]}), "
                        f"{how}",
                        "value": medians[how] / ours[redis_variant][how],
                        "note": "",
                    }
                )
        targets.append(
            {
                "target": f"Failover SIGKILL <= TTL + 1 s ({variant})",
                "met": medians["SIGKILL"] <= ttl + 1,
                "figure": f"median {medians['SIGKILL']:.2f} s",
            }
        )
        targets.append(
            {
                "target": f"Failover SIGTERM <= 2 s ({variant})",
                "met": medians["SIGTERM"] <= 2,
                "figure": f"median {medians['SIGTERM']:.2f} s",
            }
        )
        for rb_variant, rb in redbeat.items():
            for how in ("SIGKILL", "SIGTERM"):
                lower = "default" in rb_variant and rb[how] >= args.cap
                ratios.append(
                    {
                        "label": f"celery-redbeat {rb_variant.split(':')[0]} / ours "
                        f"({variant}), {how}",
                        "value": rb[how] / medians[how],
                        "note": "lower bound: redbeat capped" if lower else "",
                    }
                )
    for r in ratios:
        prefix = ">= " if r["note"] else ""
        print(f"  {r['label']:<75} {prefix}{r['value']:.2f}x")
    for t in targets:
        print(f"  {'MET ' if t['met'] else 'MISSED'} {t['target']}: {t['figure']}")
    _procs.write_json(
        args.json,
        {
            "workload": "failover",
            "title": "Failover and duplicates",
            "description": " ".join(__doc__.split("\n\n")[1:3]).replace("\n", " "),
            "rows": rows,
            "ratios": ratios,
            "targets": targets,
        },
    )
    print(f"process logs: {_procs.log_dir()}")


if __name__ == "__main__":
    main()
