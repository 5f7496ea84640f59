"""The live screen: header, nodes, jobs, runs flowing, counts and the story so far (rich)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .narrator import Event
from .snapshot import Snapshot

STATUS_STYLES = {
    "pending": "white",
    "queued": "cyan",
    "running": "bold yellow",
    "success": "green",
    "failed": "bold red",
    "retrying": "magenta",
    "missed": "dim",
    "skipped": "dim",
    "cancelled": "dim",
}
STATUS_ORDER = list(STATUS_STYLES)
# Tables with a header rule and no outer frame: every line goes to data on a 40-line terminal.
COMPACT: dict[str, Any] = {
    "box": box.SIMPLE_HEAD,
    "show_edge": False,
    "expand": True,
    "title_justify": "left",
    "title_style": "bold",
}


@dataclass
class Scene:
    """What the screen shows besides the snapshot: fixed facts and the demo's own processes."""

    admin_url: str
    login: str
    database: str
    redis: str
    lease_ttl: float
    log_dir: str
    nodes: list[tuple[str, int, str]]  # (node id, pid, process state), in start order
    services: list[tuple[str, str]]  # (name, state): worker, web, redis
    notice: str = ""
    lease: str = "redis"  # the lease backend: "redis" or "database"


def _ago(now: datetime, then: datetime | None) -> str:
    if then is None:
        return "—"
    seconds = (now - then).total_seconds()
    return f"{seconds:.1f} s ago" if seconds >= 0 else f"in {-seconds:.1f} s"


def _until(now: datetime, then: datetime | None) -> str:
    if then is None:
        return "—"
    seconds = (then - now).total_seconds()
    if seconds < 0:
        return f"{then:%H:%M:%S} (due)"
    if seconds < 120:
        return f"{then:%H:%M:%S} (in {seconds:.0f} s)"
    return f"{then:%Y-%m-%d %H:%M} UTC"


def header(scene: Scene) -> Panel:
    text = Text()
    text.append("django-cluster-cron", style="bold")
    text.append(
        " — cron jobs stored in the database, run once per slot by a cluster of schedulers\n"
    )
    text.append("Admin ", style="dim")
    text.append(scene.admin_url, style="bold underline cyan")
    text.append("  login ", style="dim")
    text.append(scene.login, style="bold")
    text.append("   (jobs, runs and the cluster page)\n")
    base = scene.admin_url.removesuffix("admin/")
    text.append("API ", style="dim")
    text.append(f"{base}cron/api/docs/", style="underline cyan")
    text.append(" (logged in)", style="dim")
    text.append("  health ", style="dim")
    text.append(f"{base}cron/health/", style="underline cyan")
    text.append("\n")
    text.append("DB ", style="dim")
    text.append(scene.database)
    text.append("   Redis ", style="dim")
    text.append(scene.redis)
    text.append("\n")
    lease = "database" if scene.lease == "database" else "Redis"
    text.append(
        f"Each scheduler node tries to hold a {lease} lease (TTL {scene.lease_ttl:g} s here, 10 s "
        "by default). The leader records every due slot as a run and sends it to Celery; the "
        "other stands by and takes over when the leader dies. Try it:\n",
        style="italic",
    )
    for key, what, _ in KEYS:
        text.append(f" {key} ", style="bold reverse")
        text.append(f" {what}  ")
    if scene.notice:
        text.append("\n")
        text.append(scene.notice, style="yellow")
    return Panel(text, border_style="blue")


KEYS = (
    ("k", "kill the leader (SIGKILL)", "kill leader"),
    ("t", "stop it gracefully (SIGTERM)", "stop leader"),
    ("r", "stop/start Redis", "Redis"),
    ("q", "quit", "quit"),
)
# Below these the screen switches to the compact layout (an 80 x 24 terminal).
COMPACT_WIDTH, COMPACT_HEIGHT = 110, 34


def small_header(scene: Scene) -> Text:
    """Two lines: where to look, and the keys."""
    text = Text()
    text.append("cluster-cron demo ", style="bold")
    text.append(scene.admin_url, style="underline cyan")
    text.append(f" ({scene.login})\n")
    for key, _, short in KEYS:
        text.append(f" {key} ", style="bold reverse")
        text.append(f" {short} ")
    return text


def nodes_table(snap: Snapshot, scene: Scene, compact: bool = False) -> Table:
    table = Table(title=None if compact else "Scheduler nodes", **COMPACT)
    columns = ["node", "pid", "process", "role", "epoch", "lease left", "last report"]
    shown = ["node", "role", "epoch", "lease left"] if compact else columns
    for column in shown:
        table.add_column(column, no_wrap=True)
    for node, pid, state in scene.nodes:
        report = snap.nodes.get(node)
        alive = state == "running"
        if not alive:
            role, style = "—", "dim"
        elif snap.redis_error:
            role, style = "? (Redis down)", "yellow"
        elif snap.leader == node:
            role, style = "★ leader", "bold green"
        elif report is not None:
            role, style = "standby", "cyan"
        else:
            role, style = "starting", "dim"
        lease = (
            f"{snap.lease_left:.1f} s" if alive and snap.leader == node and snap.lease_left else ""
        )
        epoch = str(report.epoch) if alive and report and report.epoch is not None else ""
        seen = _ago(snap.now, report.seen) if alive and report else "—"
        if not alive and compact:
            role, style = state, "red"
        cells: dict[str, Any] = {
            "node": node,
            "pid": str(pid),
            "process": Text(state, style="" if alive else "red"),
            "role": Text(role, style=style),
            "epoch": epoch,
            "lease left": lease,
            "last report": seen,
        }
        table.add_row(*(cells[c] for c in shown), style="dim" if not alive else "")
    return table


def side_table(snap: Snapshot, scene: Scene) -> Table:
    table = Table(title="Cluster", show_header=False, **COMPACT)
    table.add_column("what", style="dim", no_wrap=True)
    table.add_column("value")
    epoch = f"{snap.epoch} (held by {snap.epoch_holder})" if snap.epoch else "—"
    table.add_row("fencing epoch", epoch)
    for name, state in scene.services:
        table.add_row(name, Text(state, style="green" if state.startswith("running") else "red"))
    counts = Text()
    for status in STATUS_ORDER:
        if snap.counts.get(status):
            counts.append(f"{status} {snap.counts[status]}  ", style=STATUS_STYLES[status])
    table.add_row("runs this demo", counts or Text("none yet", style="dim"))
    return table


def jobs_table(snap: Snapshot) -> Table:
    table = Table(title="Jobs (JobDefinition)", **COMPACT)
    table.add_column("job", no_wrap=True)
    table.add_column("schedule", no_wrap=True, max_width=44, overflow="ellipsis")
    table.add_column("zone", no_wrap=True)
    table.add_column("next run (UTC)", no_wrap=True)
    for job in snap.jobs:
        table.add_row(
            job.name,
            job.schedule,
            job.timezone,
            _until(snap.now, job.next_run_at) if job.enabled else "paused",
        )
    return table


RUN_COLUMNS = ("slot", "job", "trigger", "status", "try", "dispatched by", "worker", "took", "note")
SMALL_RUN_COLUMNS = ("slot", "job", "status", "by", "took")


def runs_table(snap: Snapshot, rows: int, compact: bool = False) -> Table:
    title = None if compact else "Latest runs (JobRun: one per job and slot)"
    table = Table(title=title, **COMPACT)
    shown = SMALL_RUN_COLUMNS if compact else RUN_COLUMNS
    for column in shown:
        if column == "note":
            table.add_column(column, overflow="ellipsis", no_wrap=True, ratio=1)
        else:
            table.add_column(column, no_wrap=True, overflow="ellipsis")
    for run in snap.runs[:rows]:
        by = f"{run.node} @{run.epoch}" if run.node else ""
        cells: dict[str, Any] = {
            "slot": f"{run.slot:%H:%M:%S}",
            "job": run.job,
            "trigger": run.trigger,
            "status": Text(run.status, style=STATUS_STYLES.get(run.status, "")),
            "try": str(run.attempt),
            "dispatched by": by,
            "by": by,
            "worker": run.worker.split("@")[0] if run.worker else "",
            "took": f"{run.duration.total_seconds():.2f} s" if run.duration else "",
            "note": run.note,
        }
        table.add_row(*(cells[c] for c in shown))
    return table


def counts_line(snap: Snapshot) -> Text:
    counts = Text("runs: ", style="dim")
    for status in STATUS_ORDER:
        if snap.counts.get(status):
            counts.append(f"{status} {snap.counts[status]}  ", style=STATUS_STYLES[status])
    if not snap.counts:
        counts.append("none yet", style="dim")
    return counts


def events_text(events: Iterable[Event], lines: int) -> Text:
    text = Text()
    shown = list(events)[-lines:]
    for i, event in enumerate(shown):
        if i:
            text.append("\n")
        text.append(f"{event.at:%H:%M:%S} ", style="dim")
        text.append(event.text, style=event.style)
    if not shown:
        text.append("waiting for the first scheduler to take the lease…", style="dim")
    return text


def events_panel(events: Iterable[Event], lines: int) -> Panel:
    text = events_text(events, lines)
    return Panel(text, title="What happened", title_align="left", border_style="magenta")


def render(
    snap: Snapshot,
    scene: Scene,
    events: Iterable[Event],
    event_lines: int = 8,
    run_rows: int = 14,
    compact: bool = False,
) -> RenderableType:
    if compact:
        return render_small(snap, scene, events, event_lines, run_rows)
    top = Table.grid(expand=True)
    top.add_column(ratio=3)
    top.add_column(ratio=2)
    top.add_row(nodes_table(snap, scene), side_table(snap, scene))
    parts: list[RenderableType] = [header(scene), top, jobs_table(snap), runs_table(snap, run_rows)]
    if snap.db_error:
        parts.append(Text(f"database: {snap.db_error}", style="bold red"))
    parts.append(events_panel(events, event_lines))
    return Group(*parts)


def render_small(
    snap: Snapshot, scene: Scene, events: Iterable[Event], event_lines: int, run_rows: int
) -> RenderableType:
    """The screen for a small terminal (80 x 24): two header lines, the nodes, the run counts,
    the latest runs and the story, in that order of importance; no frames."""
    parts: list[RenderableType] = [small_header(scene)]
    if scene.notice:
        parts.append(Text(scene.notice, style="yellow"))
    parts += [nodes_table(snap, scene, compact=True), counts_line(snap)]
    parts.append(runs_table(snap, run_rows, compact=True))
    if snap.db_error:
        parts.append(Text(f"database: {snap.db_error}", style="bold red"))
    parts.append(Text("what happened", style="bold magenta"))
    parts.append(events_text(events, event_lines))
    return Group(*parts)
