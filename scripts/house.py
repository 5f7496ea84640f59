"""The house check: no module of the app over 450 lines, no class over 300.

    .venv/bin/python scripts/house.py                 # the app (django_cluster_cron/)
    .venv/bin/python scripts/house.py path/to/package # another tree (the tests use one)

Exits 1 listing each module and class over its limit with its line count, 0 when there is none;
either way it prints the biggest modules and classes. A module's lines are its file's lines; a
class's run from its ``class`` line to its last line. Migrations are generated: left out.
`make lint` runs it last (scripts/lint.sh).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MODULE_LIMIT = 450
CLASS_LIMIT = 300
PACKAGE = Path(__file__).resolve().parent.parent / "django_cluster_cron"


@dataclass(frozen=True)
class Measured:
    """A module (``name`` empty) or a class of one, and its length in lines."""

    path: str
    name: str
    lines: int
    first: int = 1

    def label(self) -> str:
        if not self.name:
            return self.path
        return f"{self.path}: {self.name} (lines {self.first}-{self.first + self.lines - 1})"


def modules(package: Path) -> list[Path]:
    """The package's Python files, migrations left out, in path order."""
    return sorted(
        path
        for path in package.rglob("*.py")
        if "migrations" not in path.relative_to(package).parts
    )


def measure(package: Path) -> tuple[list[Measured], list[Measured]]:
    """Every module's length and every class's (nested ones too), longest first."""
    found_modules: list[Measured] = []
    found_classes: list[Measured] = []
    for path in modules(package):
        shown = path.relative_to(package.parent).as_posix()
        text = path.read_text(encoding="utf-8")
        found_modules.append(Measured(shown, "", len(text.splitlines())))
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.ClassDef):
                end = node.end_lineno or node.lineno
                found_classes.append(
                    Measured(shown, node.name, end - node.lineno + 1, first=node.lineno)
                )
    found_modules.sort(key=lambda m: (-m.lines, m.path))
    found_classes.sort(key=lambda c: (-c.lines, c.path, c.first))
    return found_modules, found_classes


def report(
    package: Path,
    module_limit: int = MODULE_LIMIT,
    class_limit: int = CLASS_LIMIT,
    top: int = 5,
) -> tuple[int, list[str]]:
    """The exit status (1 when something is over its limit) and the lines to print."""
    found_modules, found_classes = measure(package)
    over = [m for m in found_modules if m.lines > module_limit]
    over += [c for c in found_classes if c.lines > class_limit]
    out: list[str] = []
    if over:
        out.append(
            f"house: {len(over)} over the limits (a module over {module_limit} lines, "
            f"a class over {class_limit}):"
        )
        for item in over:
            kind = "class" if item.name else "module"
            out.append(f"  {item.lines:5d} lines  {kind:6s}  {item.label()}")
    else:
        out.append(
            f"house: every module is at most {module_limit} lines, every class at most "
            f"{class_limit} ({len(found_modules)} modules, {len(found_classes)} classes)."
        )
    out.append(f"the biggest modules (limit {module_limit}):")
    out.extend(f"  {m.lines:5d}  {m.label()}" for m in found_modules[:top])
    out.append(f"the biggest classes (limit {class_limit}):")
    out.extend(f"  {c.lines:5d}  {c.label()}" for c in found_classes[:top])
    return (1 if over else 0), out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", type=Path, default=PACKAGE)
    parser.add_argument("--module-limit", type=int, default=MODULE_LIMIT)
    parser.add_argument("--class-limit", type=int, default=CLASS_LIMIT)
    parser.add_argument("--top", type=int, default=5, help="how many of the biggest to print")
    args = parser.parse_args(argv)
    if not args.package.is_dir():
        parser.error(f"{args.package} is not a directory")
    status, lines = report(args.package, args.module_limit, args.class_limit, args.top)
    print("\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
