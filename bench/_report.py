"""Collecting a workload's rows (median/min/max over repetitions) and writing the JSON interface.

Every workload script builds one :class:`Report`, adds rows as it measures, prints them as it
goes and writes ``--json PATH`` at the end (see bench/README.md for the format).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

FULL_SIZES = [100, 1_000, 10_000, 100_000]
QUICK_SIZES = [100, 1_000]


def parser(doc: str, reps: int) -> argparse.ArgumentParser:
    """The command line every workload accepts (the interface run.py relies on)."""
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", help="numbers of jobs (default: all four)")
    p.add_argument("--reps", type=int, default=reps, help="repetitions per measurement")
    p.add_argument("--quick", action="store_true", help="smoke run: small N, 1 rep")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    p.add_argument("--cap", type=float, help="seconds before a peer's measurement is cut off")
    return p


def sizes_and_reps(args: argparse.Namespace) -> tuple[list[int], int]:
    for size in args.sizes or []:
        if size < 1:
            raise SystemExit(f"--sizes: {size} is not a positive number of jobs")
    if args.reps < 1:
        raise SystemExit(f"--reps: {args.reps} must be at least 1")
    if args.quick:
        return sorted(args.sizes or QUICK_SIZES), 1
    return sorted(args.sizes or FULL_SIZES), args.reps


class Report:
    def __init__(self, workload: str, title: str, description: str) -> None:
        self.data: dict[str, Any] = {
            "workload": workload,
            "title": title,
            "description": description,
            "rows": [],
            "ratios": [],
            "targets": [],
        }
        print(f"\n== {title}", flush=True)

    def row(
        self,
        system: str,
        n: int | None,
        metric: str,
        unit: str,
        values: list[float],
        *,
        variant: str = "",
        note: str = "",
    ) -> dict[str, Any]:
        if not values:
            raise ValueError(f"{system} {metric} n={n}: no values measured")
        row = {
            "system": system,
            "variant": variant,
            "n": n,
            "metric": metric,
            "unit": unit,
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "reps": len(values),
            "note": note,
        }
        self.data["rows"].append(row)
        label = f"{system}{f' ({variant})' if variant else ''}"
        size = "" if n is None else f"N={n:<7,}"
        print(
            f"  {label:<34} {size:<9} {metric:<34} {fmt(row['median'])} {unit}"
            f"  [{fmt(row['min'])}..{fmt(row['max'])}] x{len(values)}"
            f"{'  ' + note if note else ''}",
            flush=True,
        )
        return row

    def find(self, system: str, metric: str, n: int | None) -> dict[str, Any] | None:
        for row in self.data["rows"]:
            if row["system"] == system and row["metric"] == metric and row["n"] == n:
                return dict(row)
        return None

    def ratio(self, label: str, value: float | None, note: str = "") -> None:
        self.data["ratios"].append({"label": label, "value": value, "note": note})
        shown = "n/a" if value is None else f"{value:.3g}"
        print(f"  ratio {label}: {shown}{'  ' + note if note else ''}", flush=True)

    def target(self, target: str, met: bool, figure: str) -> None:
        self.data["targets"].append({"target": target, "met": met, "figure": figure})
        print(f"  target {target}: {'MET' if met else 'NOT MET'} ({figure})", flush=True)

    def write(self, path: Path | None) -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.data, indent=2, default=str))


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


# -- the Markdown report (bench/run.py) ---------------------------------------------------------

PACKAGES = [
    "django-cluster-cron",
    "Django",
    "celery",
    "kombu",
    "redis",
    "django-celery-beat",
    "celery-redbeat",
    "cronsim",
    "psycopg",
]


def _first_line(command: list[str]) -> str:
    import subprocess

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return (
        (done.stdout or done.stderr).strip().splitlines()[0] if done.stdout or done.stderr else ""
    )


def environment(database: str | None) -> dict[str, str]:
    """Machine, services and package versions for the report's header."""
    import os
    import platform
    import sys
    from importlib.metadata import PackageNotFoundError, version

    info: dict[str, str] = {}
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    info["CPU"] = f"{cpu}, {os.cpu_count()} cores"
    with open("/proc/meminfo") as f:
        kib = int(f.readline().split()[1])
    info["Memory"] = f"{kib / 1024 / 1024:.1f} GiB"
    os_name = platform.platform()
    if os.path.exists("/etc/os-release"):
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    os_name = f"{line.split('=', 1)[1].strip().strip(chr(34))} ({os_name})"
    info["OS"] = os_name
    info["Python"] = sys.version.split()[0]
    root = Path(__file__).resolve().parent.parent
    binary = _first_line([sys.executable, str(root / "scripts" / "devredis.py"), "find"])
    info["Redis server"] = f"{_first_line([binary, '--version'])} (throwaway, 127.0.0.1)"
    if database and database.startswith("postgres"):
        try:
            import psycopg

            with psycopg.connect(database.replace("postgres://", "postgresql://", 1)) as conn:
                row = conn.execute("SHOW server_version").fetchone()
            server = f"PostgreSQL {row[0] if row else '?'}"
        except Exception as exc:  # the DB a full run created is dropped by now
            server = f"PostgreSQL (version not read: {type(exc).__name__})"
        info["Database"] = f"{server}, {database.rsplit('/', 1)[-1]} on 127.0.0.1:5432"
    else:
        import sqlite3

        info["Database"] = f"SQLite {sqlite3.sqlite_version} (a fresh file)"
    for name in PACKAGES:
        try:
            info[name] = version(name)
        except PackageNotFoundError:
            info[name] = "not installed"
    return info


def _cell(row: dict[str, Any]) -> str:
    if row["reps"] == 1:
        text = fmt(row["median"])
    else:
        text = f"{fmt(row['median'])} ({fmt(row['min'])}..{fmt(row['max'])})"
    note = str(row.get("note") or "")
    if not note:
        return text
    # Only a bounded figure gets the warning sign; other notes are plain context.
    partial = any(word in note for word in ("capped", "lower bound", "upper bound", "not run"))
    return f"{text} {'⚠ ' if partial else '— '}{note}"


def table(data: dict[str, Any]) -> list[str]:
    """One table per workload: a line per (system, variant, metric), a column per N."""
    rows = data.get("rows", [])
    sizes = sorted({r["n"] for r in rows if r["n"] is not None})
    has_none = any(r["n"] is None for r in rows)
    columns = [f"N={n:,}" for n in sizes] + (["—"] if has_none else [])
    lines = [
        "| system | metric | unit | " + " | ".join(columns) + " |",
        "|---|---|---|" + "---|" * len(columns),
    ]
    keys: list[tuple[str, str, str, str]] = []
    for r in rows:
        key = (r["system"], r.get("variant", ""), r["metric"], r["unit"])
        if key not in keys:
            keys.append(key)
    for system, variant, metric, unit in keys:
        cells = []
        for n in [*sizes, *([None] if has_none else [])]:
            match = [
                r
                for r in rows
                if (r["system"], r.get("variant", ""), r["metric"], r["unit"], r["n"])
                == (system, variant, metric, unit, n)
            ]
            cells.append(_cell(match[0]) if match else "")
        label = f"{system} ({variant})" if variant else system
        lines.append(f"| {label} | {metric} | {unit} | " + " | ".join(cells) + " |")
    return lines


def render(results: list[dict[str, Any]], info: dict[str, str], command: str, mode: str) -> str:
    import datetime

    out = [
        f"# Benchmark results ({mode} run, {datetime.date.today().isoformat()})",
        "",
        f"Command: `{command}` (from the repository root; `scripts/bench.sh` wraps it).",
        "Each cell: median (min..max) over the repetitions; ⚠ marks a capped or partial figure.",
        "",
        "## Machine and versions",
        "",
        "| item | value |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in info.items()],
        "",
        "## Targets",
        "",
        "| workload | target | met? | figure |",
        "|---|---|---|---|",
    ]
    for data in results:
        for t in data.get("targets", []):
            met = "yes" if t["met"] else "**no**"
            out.append(f"| {data['workload']} | {t['target']} | {met} | {t['figure']} |")
        if "error" in data:
            out.append(f"| {data['workload']} | — | not measured | {data['error']} |")
    for data in results:
        out += ["", f"## {data.get('title', data['workload'])}", ""]
        if "error" in data:
            out += [f"Not measured: {data['error']}."]
            continue
        out += [data.get("description", ""), ""]
        out += table(data)
        if data.get("ratios"):
            out += ["", "| ratio | value | note |", "|---|---|---|"]
            for r in data["ratios"]:
                out.append(f"| {r['label']} | {fmt(r['value'])} | {r.get('note', '')} |")
    return "\n".join(out) + "\n"
