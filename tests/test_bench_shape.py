"""The benchmarks have no import cycle (issue 39): the scenario modules build their rows
from ``benchmarks.rows``, and only ``benchmarks.report`` (which renders them) and
``benchmarks.run`` import the scenarios.

Imports inside functions count (a lazy import that dodges a cycle at run time is still
one); ``if TYPE_CHECKING:`` blocks do not.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _name(path: Path) -> str:
    parts = list(path.relative_to(BENCH.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {
    _name(p): p for p in sorted(BENCH.rglob("*.py")) if "upstream" not in p.parts
}  # (benchmarks/xframework/upstream: vendored peers, not ours)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test).endswith("TYPE_CHECKING"):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                found.add(child.module)
                found.update(f"{child.module}.{a.name}" for a in child.names)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {name for name in found if name in MODULES}


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def test_the_graph_is_read() -> None:
    assert "benchmarks.rows" in GRAPH["benchmarks.report"]
    assert "benchmarks.report" in GRAPH["benchmarks.run"]


def test_no_import_cycles_in_the_benchmarks() -> None:
    try:
        tuple(graphlib.TopologicalSorter(GRAPH).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"an import cycle in benchmarks/: {exc.args[1]}") from None


def test_rows_import_nothing_of_the_benchmarks() -> None:
    assert GRAPH["benchmarks.rows"] == set()


def test_the_scenario_list_is_numbered_in_order() -> None:
    """docs/performance.rst lists the scenarios as one enumerated list, which docutils ends
    (with a warning, fatal under ``sphinx -W``) at a number that does not follow the last."""
    import re

    from benchmarks import report

    page = report._rst([], "machine", {}, "date", "command", None)
    numbers = [int(m) for m in re.findall(r"^(\d+)\. \*\*", page, flags=re.MULTILINE)]
    assert numbers == list(range(1, len(numbers) + 1)), numbers
