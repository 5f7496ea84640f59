"""scripts/house.py, the house check run by `make lint`: it fails listing every module over 450
lines and every class over 300 (migrations left out), and passes a tree within the limits."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

HOUSE_PATH = Path(__file__).resolve().parents[2] / "scripts" / "house.py"


def load_house() -> ModuleType:
    """Import scripts/house.py by path (it is a script, not part of any package)."""
    spec = importlib.util.spec_from_file_location("house", HOUSE_PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["house"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


house = load_house()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def a_class(name: str, lines: int, indent: str = "") -> str:
    """Source of a class exactly ``lines`` long (its ``class`` line included)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
    return f"{indent}class {name}:\n{body}"


def filler(lines: int) -> str:
    return "".join(f"y{i} = {i}\n" for i in range(lines))


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "app"
    write(root / "__init__.py", "")
    write(root / "small.py", a_class("Small", 3))
    return root


def run(package: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = house.main([str(package)])
    return status, capsys.readouterr().out


def test_a_small_tree_passes(package, capsys):
    status, out = run(package, capsys)
    assert status == 0
    assert out.startswith("house: every module is at most 450 lines, every class at most 300")
    assert "app/small.py: Small (lines 1-3)" in out


def test_a_module_and_a_class_at_their_limits_pass(package, capsys):
    write(package / "full.py", a_class("Full", 300) + filler(150))
    status, out = run(package, capsys)
    assert status == 0, out
    assert "    450  app/full.py\n" in out
    assert "    300  app/full.py: Full (lines 1-300)\n" in out


def test_an_oversize_module_and_class_fail_and_are_listed_with_their_lines(package, capsys):
    write(package / "rooms" / "big.py", filler(451))
    rest = "".join(f"    z{i} = {i}\n" for i in range(18))
    nested = "import os\n\n\n@decorated\nclass Outer:\n" + a_class("Inner", 301, "    ") + rest
    write(package / "rooms" / "wide.py", nested)
    status, out = run(package, capsys)
    assert status == 1
    listed = out.split("the biggest modules")[0].splitlines()
    assert listed[0] == "house: 3 over the limits (a module over 450 lines, a class over 300):"
    assert listed[1:] == [
        "    451 lines  module  app/rooms/big.py",
        "    320 lines  class   app/rooms/wide.py: Outer (lines 5-324)",
        "    301 lines  class   app/rooms/wide.py: Inner (lines 6-306)",
    ]
    assert "the biggest modules (limit 450):\n    451  app/rooms/big.py\n    324  app" in out
    assert "the biggest classes (limit 300):\n    320  app/rooms/wide.py: Outer" in out


def test_migrations_are_left_out(package, capsys):
    write(package / "migrations" / "0001_initial.py", a_class("Migration", 900))
    status, out = run(package, capsys)
    assert status == 0, out
    assert "migrations" not in out


def test_run_as_a_script_it_exits_1_on_an_offender(package):
    write(package / "big.py", filler(451))
    done = subprocess.run(
        [sys.executable, str(HOUSE_PATH), str(package)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "451 lines  module  app/big.py" in done.stdout
