"""The reference pages in docs/ must say what the code does.

Each test reads a page and the code it documents and fails, naming the page and the entry, when
one has something the other lacks: a setting or its default, a check id, a command option, a
signal or one of its arguments, a model field or status, a page missing from the site's nav.
No database or Redis is used; Django is set up only to load the management commands.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from django.core.management import load_command_class
from django.core.management.base import BaseCommand
from django.dispatch import Signal

from django_cluster_cron import signals
from django_cluster_cron.conf import DEFAULTS
from django_cluster_cron.models import (
    JobDefinition,
    JobPiece,
    JobRun,
    RunStatus,
    RunSummary,
    RunTrigger,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "django_cluster_cron"
COMMANDS = sorted(
    p.stem for p in (PACKAGE / "management" / "commands").glob("*.py") if p.stem != "__init__"
)


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def table_rows(text: str) -> dict[str, list[str]]:
    """Markdown table rows keyed by their first cell with backticks stripped."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells
    return rows


def section(text: str, heading: str, level: int = 2) -> str:
    """The text under the heading up to the next heading of the same or a higher level."""
    hashes = "#" * level
    pattern = rf"^{hashes} {re.escape(heading)}\n(.*?)(?=^#{{1,{level}}} |\Z)"
    match = re.search(pattern, text, re.M | re.S)
    assert match, f"no section '{hashes} {heading}'"
    return match.group(1)


def rendered_default(value: object) -> str:
    """How the settings page writes a default: `None`, `"text"`, `10` (not `10.0`)."""
    if value is None:
        return "`None`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


# -- settings ---------------------------------------------------------------------------------


def test_every_setting_is_documented_with_its_default():
    rows = table_rows(page("reference/settings.md"))
    problems = []
    for name, setting in DEFAULTS.items():
        if name not in rows:
            problems.append(f"{name}: missing from reference/settings.md")
        elif rows[name][2] != rendered_default(setting.default):
            problems.append(
                f"{name}: the page says default {rows[name][2]}, "
                f"its declaration in conf/ says {rendered_default(setting.default)}"
            )
    assert not problems, "\n".join(problems)


def test_the_settings_page_documents_no_setting_that_does_not_exist():
    unknown = set(table_rows(page("reference/settings.md"))) - set(DEFAULTS)
    assert not unknown, f"reference/settings.md documents unknown settings: {sorted(unknown)}"


# -- system checks ----------------------------------------------------------------------------


def check_ids_in_code() -> set[str]:
    source = (PACKAGE / "checks.py").read_text(encoding="utf-8")
    return set(re.findall(r'id="(cluster_cron\.[EW]\d{3})"', source))


def test_every_check_id_is_documented():
    in_code = check_ids_in_code()
    assert in_code, "found no check ids in checks.py: has the way they are written changed?"
    documented = set(table_rows(page("reference/checks.md")))
    assert not in_code - documented, f"undocumented check ids: {sorted(in_code - documented)}"
    assert not documented - in_code, f"documented ids not in code: {sorted(documented - in_code)}"


# -- management commands ----------------------------------------------------------------------


def own_options(command_name: str) -> set[str]:
    """The command's options (its verbs' too), without the ones every Django command has."""

    def of(parser: argparse.ArgumentParser) -> set[str]:
        found = set()
        for action in parser._actions:
            found |= set(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for verb in action.choices.values():
                    found |= of(verb)
        return found

    def options(command: BaseCommand, name: str) -> set[str]:
        return of(command.create_parser("manage.py", name))

    command = load_command_class("django_cluster_cron", command_name)
    return options(command, command_name) - options(BaseCommand(), "base")


@pytest.mark.parametrize("command_name", COMMANDS)
def test_every_command_option_is_documented(command_name):
    text = section(page("reference/commands.md"), f"`{command_name}`")
    options = own_options(command_name)
    missing = {opt for opt in options if f"`{opt}" not in text}
    assert not missing, f"reference/commands.md, {command_name}: undocumented {sorted(missing)}"
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text))
    assert not mentioned - options, (
        f"reference/commands.md, {command_name}: documents options the command does not have: "
        f"{sorted(mentioned - options)}"
    )


def test_the_commands_page_covers_exactly_the_commands():
    documented = set(re.findall(r"^## `(\w+)`", page("reference/commands.md"), re.M))
    assert documented == set(COMMANDS), f"page: {sorted(documented)}, code: {COMMANDS}"


# -- signals ----------------------------------------------------------------------------------


def signals_in_code() -> dict[str, set[str]]:
    """Every Signal of the module, with the keyword arguments any call site sends it."""
    found: dict[str, set[str]] = {
        name: set() for name, value in vars(signals).items() if isinstance(value, Signal)
    }
    call = re.compile(r"signals\.send\(signals\.(\w+),\s*[\w.]+((?:,\s*\w+=[^,)]+)*)\)")
    for path in PACKAGE.rglob("*.py"):
        for name, extra in call.findall(path.read_text(encoding="utf-8")):
            found[name] |= set(re.findall(r"(\w+)=", extra))
    return found


def test_every_signal_is_documented_with_its_arguments():
    in_code = signals_in_code()
    assert in_code, "found no signals in django_cluster_cron.signals"
    rows = table_rows(page("reference/signals.md"))
    problems = []
    for name, arguments in in_code.items():
        if name not in rows:
            problems.append(f"{name}: missing from reference/signals.md")
            continue
        cell = rows[name][2]
        problems += [
            f"{name}: argument `{arg}` not documented"
            for arg in arguments
            if f"`{arg}`" not in cell
        ]
    assert not problems, "\n".join(problems)
    assert not set(rows) - set(in_code), f"unknown signals documented: {set(rows) - set(in_code)}"


# -- models -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model", [JobDefinition, JobRun, JobPiece, RunSummary], ids=lambda m: m.__name__
)
def test_every_model_field_is_documented(model):
    text = section(page("reference/models.md"), f"`{model.__name__}`")
    fields = {f.name for f in model._meta.concrete_fields if not f.primary_key}
    first_cells = " ".join(row[0] for row in table_rows(text).values())
    documented = set(re.findall(r"\w+", first_cells))
    missing = fields - documented
    assert not missing, f"reference/models.md, {model.__name__}: undocumented {sorted(missing)}"


@pytest.mark.parametrize(
    ("heading", "choices"),
    [("Statuses", RunStatus), ("Triggers", RunTrigger)],
    ids=["statuses", "triggers"],
)
def test_every_status_and_trigger_has_a_row(heading, choices):
    text = section(page("reference/models.md"), heading, level=3)
    documented, values = set(table_rows(text)), set(choices.values)
    assert documented == values, (
        f"reference/models.md, {heading}: missing {sorted(values - documented)}, "
        f"unknown {sorted(documented - values)}"
    )


# -- the site ---------------------------------------------------------------------------------


def test_every_page_is_in_the_nav():
    nav = set(re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages == nav, f"not in the nav: {sorted(pages - nav)}; missing: {sorted(nav - pages)}"
