"""No dependency's private internals in the package (issue 39).

A name with a leading underscore is another package's implementation detail: its next
release may rename or remove it, and then ``import toolnexus_trio`` (or a request) fails.
This test reads every module of the package with :mod:`ast` and fails on:

- ``import a._b``, ``from a._b import x`` and ``from a import _b`` where ``a`` is not
  this package (a relative import is ours);
- an attribute chain rooted at another package's module, ``httpx2._x`` or
  ``mod.sub._y`` (whatever our own package defines);
- ``obj._name`` read or written, and ``getattr`` / ``setattr`` / ``hasattr`` /
  ``delattr`` with a literal ``"_name"``, where ``obj`` is not ``self`` or ``cls`` and
  ``_name`` is defined nowhere in this package (so it can only be someone else's);
- the same on a chain rooted at an argument annotated with another package's type
  (``client: httpx2.AsyncClient`` -> ``client._transport``; ``ctx:
  ServerRequestContext[Any]`` -> ``ctx.session._connection``), whatever we define.

Dunder names (``__name__``, ``__aenter__``) are the language's, not private. An
exception is listed in :data:`ALLOWED` with its reason. The old code's four (httpcore2's
``_backends.trio``, ``client._transport._pool``, ``pool._network_backend``, httpx2's
``_transport_for_url``) are what this was written against.

Also here: every runtime requirement in pyproject.toml has an upper bound.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "toolnexus_trio"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

ALLOWED: dict[str, str] = {
    "os._exit": "public, documented standard library API despite its underscore: the "
    "exit of a forked child that must not run the parent's cleanup",
    "getattr(ctx.session, '_connection', None)": "mcp 2.3 (toolnexus_trio/mcp/_serve.py): "
    "a lowlevel handler gets a per-request ServerSession and no public handle on its "
    "connection, which serve needs to send a legacy client tools/list_changed and to "
    "forget it when it closes (its exit_stack); read with getattr and a fallback (no "
    "list_changed to legacy clients if it goes). Upstream proposal: a public "
    "ServerRequestContext.connection (mcp.server.context.Context has one, but the runner "
    "does not build it)",
}
"""Private-looking names of other packages the package may use (as written, e.g.
``os._exit``), each with its reason (and, for a real private name, the upstream issue
asking for a public way)."""

_ATTR_BUILTINS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _ours(module: str | None) -> bool:
    return (module or "").split(".")[0] == PACKAGE


def _modules(root: Path = ROOT) -> list[Path]:
    return sorted(root.rglob("*.py"))


def _defined_names(trees: list[ast.Module]) -> set[str]:
    """Every name our package binds somewhere: defs, classes, assignments to names and
    to ``self.x`` / ``cls.x``, arguments and import aliases."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                    names.add(node.attr)  # (``obj._x = ...`` on anything else defines nothing)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
    return names


def _attr_call(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name) and func.id in _ATTR_BUILTINS:
        return func.id
    return None


def _literal_name(node: ast.Call) -> str | None:
    if len(node.args) >= 2:
        arg = node.args[1]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
    return None


def _foreign_modules(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Local names bound to another package's module by ``import x`` / ``import x as y``,
    and those bound to a name from another package by ``from x import y`` (anywhere in
    the module, lazy imports included)."""
    modules: set[str] = set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != PACKAGE:
                    modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and not _ours(node.module):
            names.update(alias.asname or alias.name for alias in node.names)
    return modules, names


def _annotation_roots(annotation: ast.expr) -> Iterator[str]:
    """The names an annotation is built on: ``httpx2.AsyncClient`` -> ``httpx2``,
    ``Context[Any] | None`` -> ``Context``, ``"SocketStream"`` -> ``SocketStream``."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return
    if isinstance(annotation, ast.Subscript):
        yield from _annotation_roots(annotation.value)
    elif isinstance(annotation, ast.BinOp):
        yield from _annotation_roots(annotation.left)
        yield from _annotation_roots(annotation.right)
    else:
        root = _root(annotation)
        if isinstance(root, ast.Name):
            yield root.id


def _foreign_typed(tree: ast.Module, foreign: set[str]) -> set[ast.arg]:
    """The arguments annotated with another package's type (``client: httpx2.AsyncClient``,
    ``ctx: ServerRequestContext[Any]`` imported from mcp), so that ``client._x`` and
    ``ctx.session._y`` are theirs."""
    return {
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.arg)
        and node.annotation is not None
        and any(name in foreign for name in _annotation_roots(node.annotation))
    }


def _typed_names(tree: ast.Module, foreign: set[str]) -> dict[ast.AST, set[str]]:
    """For each function, the names of its arguments typed as another package's."""
    out: dict[ast.AST, set[str]] = {}
    typed = _foreign_typed(tree, foreign)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            names = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg) and a in typed}
            for inner in ast.walk(node):
                out.setdefault(inner, set()).update(names)
    return out


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def violations(where: str, tree: ast.Module, ours: set[str]) -> Iterator[str]:
    """Where *tree* (the module *where*) uses another package's private names."""
    foreign, imported = _foreign_modules(tree)
    typed = _typed_names(tree, foreign | imported)
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] != PACKAGE and any(_private(p) for p in parts):
                    yield f"{line}: import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").split(".")[0] == PACKAGE:
                continue  # ours
            parts = (node.module or "").split(".")
            if any(_private(p) for p in parts):
                yield f"{line}: from {node.module} import ..."
            for alias in node.names:
                if _private(alias.name):
                    yield f"{line}: from {node.module} import {alias.name}"
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if ast.unparse(node) in ALLOWED:
                continue
            root = _root(node)
            if isinstance(root, ast.Name) and root.id in foreign:
                yield f"{line}: {ast.unparse(node)} (another package's module)"
            elif isinstance(root, ast.Name) and root.id in typed.get(node, ()):
                yield f"{line}: {ast.unparse(node)} (an object of another package's type)"
            elif isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                continue
            elif node.attr not in ours:
                yield f"{line}: {ast.unparse(node)}"
        elif isinstance(node, ast.Call) and _attr_call(node) is not None:
            name = _literal_name(node)
            if name is None or not _private(name) or ast.unparse(node) in ALLOWED:
                continue
            target = node.args[0]
            if isinstance(target, ast.Name) and target.id in {"self", "cls"}:
                continue
            root = _root(target)
            theirs = isinstance(root, ast.Name) and (
                root.id in foreign or root.id in typed.get(node, ())
            )
            if name not in ours or theirs:
                yield f"{line}: {ast.unparse(node)}"


def package_violations(root: Path = ROOT) -> list[str]:
    """Every use of another package's private names in the package under *root*."""
    paths = _modules(root)
    assert paths, f"no modules under {root}"
    trees = [ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in paths]
    ours = _defined_names(trees)
    return [
        found
        for path, tree in zip(paths, trees, strict=True)
        for found in violations(str(path.relative_to(root.parent)), tree, ours)
    ]


def test_no_private_names_of_other_packages() -> None:
    found = package_violations()
    assert not found, "another package's private names:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("from httpcore2._backends.trio import TrioStream", True),
        ("import httpcore2._backends.trio", True),
        ("from trio import _core", True),
        ("import httpx2\nhttpx2._models.Response", True),
        ("import httpx2 as h\nh._client", True),
        ("def f(client):\n    return client._transport._pool", True),
        ("def f(http):\n    return getattr(http, '_transport_for_url', None)", True),
        ("def f(pool):\n    pool._network_backend = 1", True),
        ("def f(pool, b):\n    setattr(pool, '_network_backend', b)", True),
        ("import httpx2\ndef f(c: httpx2.AsyncClient):\n    return c._mounts", True),
        ("from trio import SocketStream\ndef f(s: 'SocketStream'):\n    return s._x", True),
        ("from mcp import C\ndef f(ctx: C[int]):\n    return getattr(ctx.session, '_c', 0)", True),
        ("from mcp import C\ndef f(ctx: C | None):\n    return ctx._c", True),
        (
            "class A:\n    def __init__(self):\n        self._c = 1\nfrom mcp import C\ndef f(ctx: C):\n    return ctx.a._c",
            True,
        ),
        (
            "class A:\n    def __init__(self):\n        self._pool = 1\ndef f(a):\n    return a._pool",
            False,
        ),
        ("class A:\n    def f(self):\n        return self._x", False),
        ("from .._http_client import _connect", False),
        ("from toolnexus_trio._converter import converter", False),
        ("import trio\ntrio.lowlevel.checkpoint", False),
        ("def f(x):\n    return x.__class__", False),
    ],
)
def test_the_reader_flags_private_names(source: str, flagged: bool) -> None:
    tree = ast.parse(source)
    # The snippet is the whole "package": the names it defines are ours.
    found = list(violations("m.py", tree, _defined_names([tree])))
    assert bool(found) is flagged, found


# -- upper bounds ---------------------------------------------------------------------

UNBOUNDED: dict[str, str] = {
    # requirement name: why it has no upper bound
}
"""Runtime requirements without an upper bound, each with its reason."""


def test_runtime_dependencies_have_upper_bounds() -> None:
    """Every requirement a user installs (the dependencies and the runtime extras) has
    an upper bound: a release we have not run on is not installed under us."""
    pyproject = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    extras = project["optional-dependencies"]
    runtime = [*project["dependencies"], *extras["mcp"], *extras["a2a"], *extras["postgres"]]
    unbounded = []
    for requirement in runtime:
        name = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]
        if "<" not in requirement and "==" not in requirement and name not in UNBOUNDED:
            unbounded.append(requirement)
    assert not unbounded, f"requirements without an upper bound: {unbounded}"
