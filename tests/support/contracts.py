"""An import-linter contract of ours: no import cycle between any two modules of a package.

import-linter's ``acyclic_siblings`` finds cycles between siblings (two packages, or two modules of
one package); this one also finds those between a package and a module inside it. Every import
counts: at module level, inside functions, and under ``if TYPE_CHECKING:``. ``make lint`` runs it
with the other contracts (pyproject.toml, ``[tool.importlinter]``).
"""

from __future__ import annotations

import sys
from typing import Any

import grimp
from importlinter import Contract, ContractCheck, fields, output


def strongly_connected(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of the graph, as lists of nodes (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                target = pending.pop()
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, sorted(edges.get(target, ()))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(sorted(component))
    return found


class AcyclicModulesContract(Contract):
    type_name = "acyclic_modules"

    package = fields.StringField()
    ignore = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        package = str(self.package)
        ignore: Any = self.ignore
        skipped = tuple(str(name) for name in (ignore or []))

        def ours(module: str) -> bool:
            inside = module == package or module.startswith(package + ".")
            return inside and not any(module == s or module.startswith(s + ".") for s in skipped)

        modules = sorted(m for m in graph.modules if ours(m))
        edges = {
            m: {t for t in graph.find_modules_directly_imported_by(m) if ours(t) and t != m}
            for m in modules
        }
        cycles = [c for c in strongly_connected(modules, edges) if len(c) > 1]
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles, "modules": len(modules)})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(f"{len(cycle)} modules import each other:", bold=True)
            for module in cycle:
                output.print_error(f"  {module}")
            output.new_line()


def main(argv: list[str]) -> Any:  # pragma: no cover - a manual check
    package = argv[0] if argv else "django_cluster_cron"
    graph = grimp.build_graph(package, cache_dir=None)
    modules = sorted(m for m in graph.modules if m.startswith(package))
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in modules}
    for cycle in strongly_connected(modules, edges):
        if len(cycle) > 1:
            print(" <-> ".join(cycle))


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
