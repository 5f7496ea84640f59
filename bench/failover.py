"""Failover time of the scheduler: SIGKILL or SIGTERM of the leader to the standby's first run.

    .venv/bin/python bench/failover.py --rounds 5            # defaults: TTL 10 s, poll 1 s
    .venv/bin/python bench/failover.py --rounds 5 --ttl 2 --poll 0.2

Each round starts two `run_scheduler` processes with an every-second job, waits until one leads
and dispatches, kills it (or stops it with SIGTERM) and measures the time until the other records
its first run. Prints every round and the median. Targets (DESIGN §7): SIGKILL <= TTL + 1 s,
SIGTERM <= 2 s.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time

from _env import boot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ttl", type=float, default=10.0)
    parser.add_argument("--poll", type=float, default=1.0)
    args = parser.parse_args()
    env = boot()

    from django.utils import timezone

    from django_cluster_cron.models import JobDefinition, JobRun

    job = JobDefinition.objects.create(
        name="bench-tick",
        cron="* * * * * *",
        timezone="UTC",
        task="tests.add",
        args=[1, 2],
        catchup_policy="all",
    )

    def start(node: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "django",
                "run_scheduler",
                "--node-id",
                node,
                "--lease-ttl",
                str(args.ttl),
                "--poll-interval",
                str(args.poll),
                "--log-level",
                "WARNING",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def first_run_by(node: str, timeout: float):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = JobRun.objects.filter(job=job, dispatched_by=node).order_by("created_at").first()
            if run:
                return run.created_at
            time.sleep(0.02)
        raise SystemExit(f"{node} did not dispatch within {timeout}s")

    results: dict[str, list[float]] = {"SIGKILL": [], "SIGTERM": []}
    for how, sig in (("SIGKILL", signal.SIGKILL), ("SIGTERM", signal.SIGTERM)):
        for round_no in range(args.rounds):
            first, second = f"{how}-{round_no}-a", f"{how}-{round_no}-b"
            leader = start(first)
            first_run_by(first, 30)
            standby = start(second)
            time.sleep(max(1.5, args.poll * 2))
            stopped = timezone.now()
            leader.send_signal(sig)
            took_over = first_run_by(second, args.ttl * 3 + 10)
            seconds = (took_over - stopped).total_seconds()
            results[how].append(seconds)
            print(f"{how} round {round_no + 1}: {seconds:.2f} s", flush=True)
            leader.wait(10)
            standby.send_signal(signal.SIGTERM)
            standby.wait(20)

    print()
    print(f"TTL {args.ttl:g} s, poll {args.poll:g} s, {args.rounds} rounds each")
    print(f"{'signal':<8} {'median':>8} {'min':>8} {'max':>8}  target")
    targets = {"SIGKILL": f"<= {args.ttl + 1:g} s (TTL + 1 s)", "SIGTERM": "<= 2 s"}
    for how, values in results.items():
        print(
            f"{how:<8} {statistics.median(values):>7.2f}s {min(values):>7.2f}s "
            f"{max(values):>7.2f}s  {targets[how]}"
        )


if __name__ == "__main__":
    main()
