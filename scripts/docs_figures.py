"""Draw the documentation's pictures as SVG files under docs/assets/.

    .venv/bin/python scripts/docs_figures.py            # redraw all four from code and data
    .venv/bin/python scripts/docs_failover.py           # re-record the failover run, then redraw

The architecture, the run lifecycle and the "why each slot runs once" sequence are drawn from
the tables below; the failover timeline is drawn from docs/assets/failover-run.json, which
scripts/docs_failover.py records from real `run_scheduler` processes. The output is committed,
so building the docs needs neither this script nor any renderer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from docs_svg import (  # the script directory is on sys.path, not a package
    AMBER,
    AMBER_BG,
    BLUE,
    BLUE_BG,
    GREEN,
    GREEN_BG,
    GREY_BG,
    INK,
    LINE,
    MUTED,
    PURPLE,
    PURPLE_BG,
    RED,
    RED_BG,
    TEAL,
    TEAL_BG,
    Svg,
)

ASSETS = Path(__file__).resolve().parent.parent / "docs" / "assets"


def architecture() -> Svg:
    svg = Svg(920, 580, "django-cluster-cron architecture")
    svg.box(
        310,
        20,
        300,
        84,
        "Redis (through django-redis)",
        ("leader lease key · change channel", "cluster locks"),
        fill=RED_BG,
        stroke=RED,
    )
    hosts = (
        ("host 1: run_scheduler", "leader, epoch 7", BLUE_BG, BLUE, False),
        ("host 2: run_scheduler", "standby", "#fff", LINE, True),
        ("host 3: run_scheduler", "standby", "#fff", LINE, True),
    )
    for i, (title, role, fill, stroke, dash) in enumerate(hosts):
        svg.box(30 + 305 * i, 170, 250, 70, title, (role,), fill=fill, stroke=stroke, dash=dash)
    svg.line(155, 170, 380, 106, color=RED)
    svg.text(285, 130, "renew lease every TTL/3", size=12, fill=RED, anchor="end")
    for x_from, x_to in ((460, 460), (765, 540)):
        svg.line(x_from, 170, x_to, 106, color=RED, dash=True)
    svg.text(690, 128, "standbys: SET NX every poll", size=12, fill=RED, anchor="start")

    svg.box(
        30,
        340,
        330,
        90,
        "Database",
        ("JobDefinition · JobRun (the ledger)", "SchedulerLease (the fencing epoch)"),
        fill=TEAL_BG,
        stroke=TEAL,
    )
    svg.box(
        560, 340, 330, 90, "Celery broker", ("Redis, RabbitMQ, …",), fill=AMBER_BG, stroke=AMBER
    )
    svg.line(120, 240, 120, 338, color=TEAL)
    svg.text(128, 285, "record runs,", size=12, fill=TEAL, anchor="start")
    svg.text(128, 300, "fenced by the epoch", size=12, fill=TEAL, anchor="start")
    svg.line(250, 240, 640, 338, color=AMBER)
    svg.text(460, 278, "publish execute_run", size=12, fill=AMBER, anchor="start")
    svg.text(460, 293, "task id cron-<job>-<slot>", size=12, fill=AMBER, anchor="start", mono=True)

    svg.box(
        30,
        490,
        330,
        70,
        "Django admin",
        ("jobs · runs · cluster status",),
        fill=PURPLE_BG,
        stroke=PURPLE,
    )
    svg.box(
        560,
        490,
        330,
        70,
        "Celery workers",
        ("execute_run: claim → your task → record",),
        fill=GREEN_BG,
        stroke=GREEN,
    )
    svg.line(725, 430, 725, 488, color=AMBER)
    svg.text(733, 464, "deliver (maybe twice)", size=12, fill=AMBER, anchor="start")
    svg.line(560, 510, 362, 420, color=GREEN)
    svg.text(460, 518, "claim the run", size=12, fill=GREEN)
    svg.text(460, 533, "(conditional UPDATE),", size=12, fill=GREEN)
    svg.text(460, 548, "record the result", size=12, fill=GREEN)
    svg.line(150, 490, 150, 432, color=PURPLE)
    svg.text(158, 466, "edit jobs, read the ledger", size=12, fill=PURPLE, anchor="start")
    return svg


# Run statuses: position and colours. Active states are blue, waiting-to-retry amber, final
# states green/red/grey (the admin uses the same meanings).
STATES = {
    "pending": (190, 210, BLUE_BG, BLUE),
    "queued": (360, 210, BLUE_BG, BLUE),
    "running": (560, 210, BLUE_BG, BLUE),
    "success": (820, 120, GREEN_BG, GREEN),
    "failed": (820, 300, RED_BG, RED),
    "retrying": (560, 390, AMBER_BG, AMBER),
    "skipped": (560, 70, GREY_BG, MUTED),
    "missed": (250, 70, GREY_BG, MUTED),
    "cancelled": (300, 390, GREY_BG, MUTED),
    "buffered": (120, 330, AMBER_BG, AMBER),
    "terminating": (720, 390, AMBER_BG, AMBER),
}
BOX_W, BOX_H = 110, 36


def lifecycle() -> Svg:
    svg = Svg(940, 500, "JobRun status lifecycle")
    for name, (cx, cy, fill, stroke) in STATES.items():
        svg.rect(cx - BOX_W / 2, cy - BOX_H / 2, BOX_W, BOX_H, fill=fill, stroke=stroke, rx=18)
        svg.text(cx, cy + 5, name, size=14, weight="600", mono=True)
    svg.circle(50, 210, 9, fill=INK)
    svg.text(50, 240, "slot due", size=12, fill=MUTED)
    svg.text(50, 255, "run now", size=12, fill=MUTED)
    svg.text(50, 270, "backfill", size=12, fill=MUTED)

    def label(x: float, y: float, content: str, anchor: str = "middle") -> None:
        svg.text(x, y, content, size=11.5, fill=MUTED, anchor=anchor)

    svg.line(60, 210, 133, 210, color=INK)
    label(97, 200, "record")
    svg.path("M50,200 L50,70 L193,70", color=INK)
    label(56, 110, "catch-up policy:", anchor="start")
    label(56, 124, "not run", anchor="start")
    svg.path("M50,200 L50,22 L560,22 L560,50", color=INK)
    label(400, 16, "overlap policy (at dispatch): previous run still waiting or running")
    svg.line(245, 210, 303, 210, color=BLUE)
    label(274, 200, "published")
    svg.line(415, 210, 503, 210, color=BLUE)
    label(459, 200, "claimed by")
    label(459, 232, "one delivery")
    svg.path("M190,192 C240,140 500,140 545,190", color=BLUE, dash=True)
    label(370, 148, "claimed before it was marked queued")
    svg.line(560, 192, 560, 90, color=MUTED)
    label(566, 140, "overlap lock held", anchor="start")
    label(566, 154, "(at execution)", anchor="start")
    svg.line(615, 200, 763, 128, color=GREEN)
    label(704, 182, "task returned", anchor="start")
    svg.line(615, 220, 763, 292, color=RED)
    label(700, 240, "last attempt failed,", anchor="start")
    label(700, 254, "worker lost (fail)", anchor="start")
    svg.line(540, 228, 540, 370, color=AMBER)
    label(534, 285, "failed, retries left;", anchor="end")
    label(534, 299, "worker lost (retry)", anchor="end")
    svg.line(580, 372, 580, 230, color=AMBER)
    label(586, 292, "next attempt claimed", anchor="start")
    svg.line(205, 228, 282, 370, color=MUTED)
    svg.line(345, 228, 315, 370, color=MUTED)
    svg.line(505, 390, 357, 390, color=MUTED)
    label(430, 382, "operator: cancel")
    svg.path("M820,318 L820,465 L150,465 L150,230", color=RED, dash=True)
    label(480, 458, "operator: retry (same run, attempt + 1)")
    # Held back by the overlap policy (buffer_all, cancel_other, terminate_other), released in
    # slot order; a cancel that outlasts its grace, terminated.
    svg.path("M43,216 L22,236 L22,330 L65,330", color=AMBER)
    label(28, 300, "held back", anchor="start")
    svg.line(140, 312, 180, 228, color=AMBER)
    label(166, 282, "its turn", anchor="start")
    svg.line(610, 228, 700, 372, color=AMBER)
    label(692, 336, "cancel past", anchor="start")
    label(692, 350, "its grace", anchor="start")
    svg.path("M665,400 L620,420 L355,400", color=AMBER)
    label(520, 426, "terminated")
    return svg


LANES = ("scheduler A", "scheduler B", "Redis", "database", "broker", "worker 1", "worker 2")
LANE_X = {name: 80 + 140 * i for i, name in enumerate(LANES)}
# (from, to, text, colour, dashed reply). "note:" rows are notes across a lane.
SEQUENCE: tuple[tuple[str, str, str, str, bool], ...] = (
    ("scheduler A", "Redis", "SET leader tokenA NX PX 10000 → OK", RED, False),
    ("scheduler A", "database", "epoch = epoch + 1 → 7", TEAL, False),
    ("note:scheduler A", "", "paused (GC, VM migration, SIGSTOP)", MUTED, False),
    ("note:Redis", "", "lease expires after the TTL", RED, False),
    ("scheduler B", "Redis", "SET leader tokenB NX PX 10000 → OK", RED, False),
    ("scheduler B", "database", "epoch = epoch + 1 → 8", TEAL, False),
    ("scheduler B", "database", "WHERE epoch = 8 ✓  INSERT run (job 3, 09:00) ✓", TEAL, False),
    ("scheduler B", "broker", "publish id cron-3-20261123T090000Z", AMBER, False),
    ("scheduler A", "database", "wakes: WHERE epoch = 7 → 0 rows, abandon", TEAL, True),
    ("note:scheduler A", "", "lease.fenced: back to standby", MUTED, False),
    ("broker", "worker 1", "deliver cron-3-…", AMBER, False),
    ("broker", "worker 2", "deliver cron-3-… again", AMBER, False),
    (
        "worker 1",
        "database",
        "claim: UPDATE … WHERE id, task id, attempt match and status waiting → 1 row",
        GREEN,
        False,
    ),
    ("worker 2", "database", "claim: same UPDATE → 0 rows: ack, drop", GREEN, True),
    ("worker 1", "database", "runs your task, records success", GREEN, False),
)
# The four layers, and the rows of SEQUENCE each one acts in.
LAYERS = (
    ("lease: who should lead", RED, (0, 3, 4)),
    ("epoch: whose writes count", TEAL, (1, 5, 6, 8)),
    ("unique (job, slot): one row per slot", TEAL, (6,)),
    ("claim: one execution per run", GREEN, (12, 13)),
)


def _badge(svg: Svg, x: float, y: float, number: int, color: str) -> None:
    svg.circle(x, y, 8, fill=color)
    svg.text(x, y + 4, str(number), size=11, weight="700", fill="#fff")


def sequence() -> Svg:
    top, step = 80, 38
    height = top + step * len(SEQUENCE) + 60
    svg = Svg(1000, height, "Why each slot runs once: lease, epoch, unique constraint, claim")
    for name, x in LANE_X.items():
        svg.rect(x - 58, 20, 116, 34, fill=GREY_BG, stroke=LINE, rx=6)
        svg.text(x, 42, name, size=13, weight="600")
        svg.line(x, 54, x, height - 50, color=LINE, arrow=False, dash=True, width=1)
    for row, (source, target, content, color, reply) in enumerate(SEQUENCE):
        y = top + step * row + 18
        badges = [(i + 1, c) for i, (_, c, rows) in enumerate(LAYERS) if row in rows]
        if source.startswith("note:"):
            x = LANE_X[source[5:]]
            svg.rect(x - 10, y - 15, 260, 24, fill="#fffbe6", stroke="#e6d58a", rx=4)
            for k, (number, badge_color) in enumerate(badges):
                _badge(svg, x + 4 + 20 * k, y - 3, number, badge_color)
            svg.text(x + 2 + 20 * len(badges), y + 2, content, size=12, anchor="start", italic=True)
            continue
        x1, x2 = LANE_X[source], LANE_X[target]
        forward = x2 > x1
        svg.line(x1, y + 6, x2 + (-4 if forward else 4), y + 6, color=color, dash=reply)
        sign = 1 if forward else -1
        for k, (number, badge_color) in enumerate(badges):
            _badge(svg, x1 + sign * (16 + 20 * k), y - 4, number, badge_color)
        text_x = x1 + sign * (8 + 20 * len(badges))
        svg.text(
            text_x, y, content, size=12, anchor="start" if forward else "end", mono=True, halo=True
        )
    legend_y = height - 22
    for i, (content, color, _rows) in enumerate(LAYERS):
        x = 40 + 240 * i
        _badge(svg, x, legend_y - 4, i + 1, color)
        svg.text(x + 14, legend_y, content, size=12, anchor="start", fill=color)
    return svg


def failover_timeline(data: dict[str, Any]) -> Svg:
    """Lanes per node with lease holding, the kill, and each run drawn slot → dispatch."""
    events, ttl = data["events"], float(data["ttl"])
    t0, t1 = float(data["window"][0]), float(data["window"][1])
    width, left, right = 980, 150, 40
    scale = (width - left - right) / (t1 - t0)

    def x(t: float) -> float:
        return left + (t - t0) * scale

    lanes = {node: 90 + 90 * i for i, node in enumerate(data["nodes"])}
    slot_y = 90 + 90 * len(lanes) + 30
    height = slot_y + 80
    svg = Svg(width, height, "Failover timeline recorded from two run_scheduler processes")
    first, _, rest = data["caption"].partition(": ")
    svg.text(width / 2, 20, first + ":", size=13, fill=MUTED)
    svg.text(width / 2, 38, rest, size=13, fill=MUTED)
    for second in range(int(t0), int(t1) + 1):
        svg.line(x(second), 50, x(second), slot_y + 8, color="#e4e7eb", arrow=False, width=1)
        svg.text(x(second), slot_y + 28, f"{second:+d}s" if second else "0", size=11, fill=MUTED)
    svg.text(left - 12, slot_y + 4, "slots", size=13, anchor="end", weight="600")
    svg.line(left, slot_y, width - right, slot_y, color=LINE, arrow=False)
    for node, y in lanes.items():
        svg.text(left - 12, y + 5, f"node {node}", size=13, anchor="end", weight="600")
    for lease in data["leases"]:
        y = lanes[lease["node"]]
        start, end = max(lease["start"], t0), min(lease["end"], t1)
        svg.rect(x(start), y - 22, x(end) - x(start), 44, fill=BLUE_BG, stroke=BLUE, rx=4)
        svg.text(
            x(start) + 6,
            y - 28,
            f"leads, epoch {lease['epoch']}",
            size=11.5,
            anchor="start",
            fill=BLUE,
        )
    kill = 0.0
    svg.line(x(kill), 48, x(kill), slot_y, color=RED, arrow=False, width=2)
    svg.text(x(kill) + 4, 62, "SIGKILL of the leader", size=12, anchor="start", fill=RED)
    svg.rect(
        x(kill),
        lanes[data["nodes"][0]] - 22,
        ttl * scale,
        44,
        fill="#fff",
        stroke=RED,
        rx=4,
        dash=True,
    )
    svg.text(
        x(kill) + 6,
        lanes[data["nodes"][0]] + 5,
        f"dead; its lease lives ≤ TTL ({ttl:g} s)",
        size=11.5,
        anchor="start",
        fill=RED,
    )
    took_lease = {lease["node"]: lease["start"] for lease in data["leases"]}
    for run in events:
        if run["kind"] != "run" or run["slot"] < t0:
            continue
        y = lanes[run["node"]]
        # A slot that fell after the kill and before this node led: caught up from the gap.
        color = AMBER if 0 < run["slot"] < took_lease[run["node"]] else GREEN
        svg.line(
            x(run["slot"]), slot_y - 4, x(run["at"]), y + 8, color=color, arrow=False, width=1.2
        )
        svg.circle(x(run["slot"]), slot_y, 3, fill=MUTED)
        svg.circle(x(run["at"]), y + 8, 4.5, fill=color)
    legend_y = height - 22
    svg.circle(left + 6, legend_y - 4, 4.5, fill=GREEN)
    svg.text(left + 16, legend_y, "run dispatched on time", size=12, anchor="start")
    svg.circle(left + 330, legend_y - 4, 4.5, fill=AMBER)
    svg.text(
        left + 340,
        legend_y,
        "slot that fell in the gap, dispatched by the new leader",
        size=12,
        anchor="start",
    )
    return svg


def main() -> None:
    ASSETS.mkdir(parents=True, exist_ok=True)
    figures = {
        "architecture": architecture(),
        "run-lifecycle": lifecycle(),
        "why-once-sequence": sequence(),
    }
    data_file = ASSETS / "failover-run.json"
    if data_file.exists():
        figures["failover-timeline"] = failover_timeline(json.loads(data_file.read_text()))
    else:
        print(f"no {data_file.name}: run scripts/docs_failover.py to record one", file=sys.stderr)
    for name, svg in figures.items():
        path = ASSETS / f"{name}.svg"
        svg.save(path)
        print(f"wrote {path.relative_to(ASSETS.parent.parent)}")


if __name__ == "__main__":
    main()
