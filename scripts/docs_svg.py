"""A tiny SVG writer for the documentation's figures (standard library only).

Hand-built SVG keeps the pictures sharp, diffable and free of any renderer at docs build time.
Text widths are estimated (no font metrics), so layouts leave generous margins.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
MONO = "ui-monospace, 'SFMono-Regular', Menlo, Consolas, monospace"

# One palette for every figure: statuses, lanes and arrows mean the same colour everywhere.
INK = "#1f2933"
MUTED = "#616e7c"
LINE = "#9aa5b1"
BLUE = "#2563eb"
BLUE_BG = "#e0ecff"
GREEN = "#15803d"
GREEN_BG = "#dcfce7"
RED = "#b91c1c"
RED_BG = "#fee2e2"
AMBER = "#b45309"
AMBER_BG = "#fef3c7"
GREY_BG = "#eef0f3"
TEAL = "#0f766e"
TEAL_BG = "#d5f5f0"
PURPLE = "#7c3aed"
PURPLE_BG = "#ede9fe"


class Svg:
    def __init__(self, width: float, height: float, title: str) -> None:
        self.width, self.height = width, height
        self.parts: list[str] = [f"<title>{escape(title)}</title>"]
        self._markers: set[str] = set()

    def _marker(self, color: str) -> str:
        ident = "arrow-" + color.lstrip("#")
        if ident not in self._markers:
            self._markers.add(ident)
            self.parts.insert(
                1,
                f'<defs><marker id="{ident}" viewBox="0 0 10 10" refX="9" refY="5" '
                f'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
                f'<path d="M0,0 L10,5 L0,10 z" fill="{color}"/></marker></defs>',
            )
        return ident

    def rect(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        *,
        fill: str = "#fff",
        stroke: str = LINE,
        rx: float = 8,
        dash: bool = False,
        width: float = 1.5,
    ) -> None:
        extra = ' stroke-dasharray="5 4"' if dash else ""
        self.parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx}" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{width}"{extra}/>'
        )

    def circle(self, cx: float, cy: float, r: float, *, fill: str, stroke: str = "none") -> None:
        self.parts.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r}" fill="{fill}" stroke="{stroke}"/>'
        )

    def text(
        self,
        x: float,
        y: float,
        content: str,
        *,
        size: float = 13,
        anchor: str = "middle",
        weight: str = "normal",
        fill: str = INK,
        mono: bool = False,
        italic: bool = False,
        halo: bool = False,
    ) -> None:
        style = ' font-style="italic"' if italic else ""
        if halo:  # a white outline keeps text readable where it crosses a line
            style += ' stroke="#fff" stroke-width="4" paint-order="stroke"'
        self.parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-family="{MONO if mono else FONT}" '
            f'font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{fill}"{style}>{escape(content)}</text>'
        )

    def line(
        self,
        x1: float,
        y1: float,
        x2: float,
        y2: float,
        *,
        color: str = MUTED,
        arrow: bool = True,
        dash: bool = False,
        width: float = 1.6,
    ) -> None:
        d = f"M{x1:.1f},{y1:.1f} L{x2:.1f},{y2:.1f}"
        self.path(d, color=color, arrow=arrow, dash=dash, width=width)

    def path(
        self,
        d: str,
        *,
        color: str = MUTED,
        arrow: bool = True,
        dash: bool = False,
        width: float = 1.6,
    ) -> None:
        marker = f' marker-end="url(#{self._marker(color)})"' if arrow else ""
        extra = ' stroke-dasharray="6 4"' if dash else ""
        self.parts.append(
            f'<path d="{d}" fill="none" stroke="{color}" stroke-width="{width}"{extra}{marker}/>'
        )

    def box(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        title: str,
        lines: tuple[str, ...] = (),
        *,
        fill: str = "#fff",
        stroke: str = LINE,
        dash: bool = False,
    ) -> None:
        """A rounded box with a bold title and smaller lines, centred."""
        self.rect(x, y, w, h, fill=fill, stroke=stroke, dash=dash)
        total = 17 + 16 * len(lines)
        top = y + (h - total) / 2 + 13
        self.text(x + w / 2, top, title, size=14, weight="600")
        for i, content in enumerate(lines):
            self.text(x + w / 2, top + 18 + 16 * i, content, size=12, fill=MUTED)

    def save(self, path: Path) -> None:
        body = "\n".join(self.parts)
        path.write_text(
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width:g} {self.height:g}" '
            f'width="{self.width:g}" height="{self.height:g}" role="img">\n'
            f'<rect width="100%" height="100%" fill="#ffffff"/>\n{body}\n</svg>\n',
            encoding="utf-8",
        )
