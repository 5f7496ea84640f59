"""The state table of a run (``ledger.states``) is true to the code.

* Every function of the app that writes a run's ``status`` is in the table (or a helper of one
  that is): a new write path that moves runs outside the table fails here.
* Each per-run function of the table, tried on a run in every state, moves it only out of the
  states it lists and only into the states it lists, and says whether it wrote.
* ``RunStatus``'s docstring and the architecture page show the table as it is.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import django_cluster_cron
from django_cluster_cron.ledger import statements, transitions
from django_cluster_cron.ledger.states import HELPERS, MOVES, table
from django_cluster_cron.models import JobRun, RunStatus
from tests.support.jobs import make_job, make_run

pytestmark = pytest.mark.django_db

PACKAGE = pathlib.Path(django_cluster_cron.__file__).parent
ROOT = PACKAGE.parent
# Calls whose keyword ``status=`` reads rows rather than writing them.
READS = {"filter", "exclude", "Q", "get", "When", "values", "annotate", "count", "first"}


def _status_writes() -> set[tuple[str, str]]:
    """(module under the package, function) of every write of a run's status the code spells
    out: an ``update(status=...)``, a ``status=RunStatus.…`` given to anything but a query, a
    ``"status": RunStatus.…`` in a dict, an assignment to ``….status``."""
    found: set[tuple[str, str]] = set()
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)

        def visit(node: ast.AST, scope: list[str], module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                inner = scope
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    inner = [*scope, child.name]
                if _writes_status(child):
                    found.add((module, ".".join(scope)))
                visit(child, inner)

        visit(ast.parse(path.read_text()), [])
    return found


def _writes_status(node: ast.AST) -> bool:
    """Whether ``node`` writes a run's status (a piece's, whose value names ``PieceStatus``,
    is not a run's)."""
    if "PieceStatus" in ast.unparse(node) and not isinstance(node, ast.Dict):
        return False
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        for keyword in node.keywords:
            if keyword.arg != "status" or name in READS:
                continue
            if name == "update" or "RunStatus" in ast.unparse(keyword.value):
                return True
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            named = isinstance(key, ast.Constant) and key.value == "status"
            if named and value is not None and "RunStatus" in ast.unparse(value):
                return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Attribute) and t.attr == "status" for t in targets)
    return False


def test_every_write_of_a_run_status_is_in_the_state_table():
    allowed = {f"ledger.{move.function}" for move in MOVES}
    allowed |= {f"ledger.{helper}" for helper in HELPERS}
    outside = sorted(
        f"{module}.{function}"
        for module, function in _status_writes()
        if f"{module}.{function}" not in allowed
    )
    assert not outside, (
        f"these write a run's status and are not in the state table (ledger/states.py): {outside}"
    )


def test_the_scan_sees_a_status_write_where_one_is():
    """The scan would catch a new write path: each form it looks for is found."""
    for source in (
        "JobRun.objects.filter(pk=1).update(status=RunStatus.FAILED)",
        "fields = {'status': RunStatus.SKIPPED}",
        "run.status = 'success'",
        "new_run(job, slot, status=RunStatus.SKIPPED)",
    ):
        assert any(_writes_status(node) for node in ast.walk(ast.parse(source))), source
    assert not any(
        _writes_status(node)
        for node in ast.walk(ast.parse("JobRun.objects.filter(status=RunStatus.RUNNING)"))
    )


def test_every_function_of_the_table_exists():
    import importlib

    for name in [move.function for move in MOVES] + list(HELPERS):
        module, function = name.rsplit(".", 1)
        found = importlib.import_module(f"django_cluster_cron.ledger.{module}")
        assert callable(getattr(found, function, None)), name


def _lines(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines())


def test_run_status_docstring_and_the_architecture_page_show_the_table():
    shown = _lines(table())
    assert shown in _lines(RunStatus.__doc__ or ""), (
        "RunStatus's docstring: paste ledger.states.table()"
    )
    page = (ROOT / "docs" / "explanation" / "architecture.md").read_text()
    assert shown in _lines(page), "docs/explanation/architecture.md: paste ledger.states.table()"


# -- each per-run function, from every state ---------------------------------------------------

NOW = timezone.now


def _claim(run: JobRun) -> bool:
    return statements.claim_run(run.pk, run.task_id, run.attempt, "here:1") is not None


CALLS: dict[str, Callable[[JobRun], Any]] = {
    "statements.claim_run": _claim,
    "transitions.succeeded": lambda run: transitions.succeeded(
        run, result="done", duration=timedelta(seconds=1)
    ),
    "transitions.failed": lambda run: transitions.failed(
        run, error="E", trace="", duration=timedelta(seconds=1)
    ),
    "transitions.retrying": lambda run: transitions.retrying(
        run, retry_at=NOW(), error="E", trace="", duration=timedelta(seconds=1)
    ),
    "transitions.skipped": lambda run: transitions.skipped(
        run, reason="refused", duration=timedelta(seconds=1)
    ),
    "transitions.missed": lambda run: transitions.missed(run, reason="late"),
    "transitions.stopped": lambda run: transitions.stopped(
        run, error="stopped", trace="", duration=timedelta(seconds=1)
    ),
    "transitions.retried": transitions.retried,
    "transitions.rerun": transitions.rerun,
    "transitions.cancelled": lambda run: transitions.cancelled(run, "by a test"),
    "transitions.discarded": lambda run: transitions.discarded(
        run.pk,
        run.task_id,
        run.attempt,
        terminated=run.status in ("running", "terminating"),
        expired=False,
        signum=15,
    ),
    "transitions.unrunnable": lambda run: transitions.unrunnable(
        run.pk, run.task_id, run.attempt, "no such task"
    ),
}


@pytest.mark.parametrize("function", sorted(CALLS))
def test_each_move_leaves_only_the_states_it_lists(function):
    move = next(move for move in MOVES if move.function == function)
    job = make_job()
    for state in RunStatus.values:
        run = make_run(job, status=state)
        wrote = CALLS[function](JobRun.objects.select_related("job").get(pk=run.pk))
        after = JobRun.objects.get(pk=run.pk).status
        if state in move.leaves:
            assert after in move.enters, (function, state, after)
            assert wrote, (function, state)
        else:
            assert after == state, (function, state, after)
            assert not wrote, (function, state)
