"""The package keeps its shape: floors, no import cycles, no overlong modules.

Read from the source with :mod:`ast`, so nobody has to remember the rules
(``docs/architecture.rst`` explains them):

- Every module belongs to a floor; a module imports only its own floor or lower ones.
  The one exception is named in :data:`UPWARD`, with its reason.
- No import cycles between modules, counting imports inside functions (a lazy import
  that dodges a cycle at run time is still one); only ``if TYPE_CHECKING:`` blocks are
  exempt, since they never run.
- No dynamic imports (``importlib.import_module``, ``__import__``) in the package: the
  graph read here would not see them.
- No module over :data:`MAX_LINES` lines unless the first paragraph of its docstring
  says why, with the words "long because".
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "toolnexus_trio"
MAX_LINES = 650

FLOORS: list[tuple[str, set[str]]] = [
    # (name, the top-level parts of toolnexus_trio on that floor), bottom first.
    (
        "ground",
        {
            "_cancel",
            "_content",
            "_converter",
            "_groups",
            "_http_client",
            "_lines",
            "_http_pool",
            "_names",
            "_opening",
            "_procs",
            "_reaper",
            "_relay",
            "_runctx",
            "_sampling",
            "_schema",
            "_served",
            "_streak",
            "_tools",
            "_version",
            "_wire",
        },
    ),
    ("tool sources and the host", {"builtins", "skills", "mcp", "http_tools", "tesseron", "a2a"}),
    ("toolkit", {"_toolkit"}),
    ("stores", {"stores"}),
    ("loop", {"loop"}),
    ("models, the gateway and judgments", {"models", "gateway", "judge"}),
    ("agents", {"agents"}),
    ("agents over ACP", {"acp"}),
    ("commands and test tools", {"cli", "testing"}),
    ("facade", {"", "__main__", "content"}),
]

UPWARD: dict[tuple[str, str], str] = {
    (
        "toolnexus_trio.tesseron",
        "toolnexus_trio.gateway",
    ): "the host facade re-exports the gateway's four names for old imports, loaded lazily",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path) -> tuple[set[str], list[str]]:
    """The package modules *module* imports (outside ``TYPE_CHECKING``), and any dynamic
    imports it makes."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    dynamic: list[str] = []

    def add(target: str) -> None:
        if target in MODULES and target != module:
            found.add(target)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[: len(package) - (child.level - 1)]
                    target = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    target = child.module or ""
                submodules = [f"{target}.{alias.name}" for alias in child.names]
                if child.module is None and all(s in MODULES for s in submodules):
                    found.update(s for s in submodules if s != module)  # from . import _x
                else:
                    add(target)
                    for sub in submodules:
                        add(sub)
            elif isinstance(child, ast.Call):
                name = ast.unparse(child.func)
                if name.endswith("import_module") or name == "__import__":
                    dynamic.append(f"line {child.lineno}: {ast.unparse(child)}")
            visit(child)

    visit(tree)
    return found, dynamic


GRAPH: dict[str, set[str]] = {}
DYNAMIC: dict[str, list[str]] = {}
for _name, _path in MODULES.items():
    GRAPH[_name], DYNAMIC[_name] = _imports(_name, _path)


def _floor(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    for index, (_, parts) in enumerate(FLOORS):
        if part in parts:
            return index
    raise AssertionError(
        f"{module} is on no floor: add {part!r} to FLOORS in tests/test_layout.py "
        "(and to docs/architecture.rst)"
    )


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_graph_is_read() -> None:
    # A parser that finds nothing would pass every rule below.
    assert "toolnexus_trio.loop._client" in GRAPH
    assert "toolnexus_trio._toolkit" in GRAPH["toolnexus_trio.loop._client"]
    assert sum(len(v) for v in GRAPH.values()) > 200


def test_no_import_cycles() -> None:
    cycles = _cycles(GRAPH)
    described = [
        " ; ".join(f"{m} -> {sorted(set(cycle) & GRAPH[m])}" for m in cycle) for cycle in cycles
    ]
    assert not cycles, "import cycles:\n" + "\n".join(described)


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_is_on_a_floor() -> None:
    for module in MODULES:
        _floor(module)  # raises, naming the module, when it is on none


def test_every_module_imports_its_own_floor_or_lower() -> None:
    wrong = [
        f"{module} (floor {FLOORS[_floor(module)][0]!r}) imports {target} "
        f"(floor {FLOORS[_floor(target)][0]!r})"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if _floor(target) > _floor(module) and (module, target) not in UPWARD
    ]
    assert not wrong, "\n".join(wrong)


def test_the_upward_exceptions_are_still_needed() -> None:
    for module, target in UPWARD:
        assert target in GRAPH[module], f"{module} no longer imports {target}: drop it from UPWARD"


def test_no_dynamic_imports() -> None:
    found = {module: calls for module, calls in DYNAMIC.items() if calls}
    assert not found, found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_are_short_or_say_why(module: str) -> None:
    path = MODULES[module]
    text = path.read_text(encoding="utf-8")
    lines = text.count("\n") + 1
    if lines <= MAX_LINES:
        return
    docstring = ast.get_docstring(ast.parse(text)) or ""
    first_paragraph = docstring.split("\n\n")[0]
    assert "long because" in first_paragraph, (
        f"{path.relative_to(PACKAGE.parent)} has {lines} lines (over {MAX_LINES}): split it "
        "along a seam, or say why in the first paragraph of its docstring ('long because ...')"
    )
