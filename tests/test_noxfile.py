"""nox says what it installs: every install shows pip's progress, none is quiet."""

from __future__ import annotations

import ast
from pathlib import Path

NOXFILE = Path(__file__).resolve().parent.parent / "noxfile.py"


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}  # fmt: skip


def test_every_install_shows_its_progress() -> None:
    tree = ast.parse(NOXFILE.read_text("utf-8"))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    installs = [c for c in calls if isinstance(c.func, ast.Attribute) and c.func.attr == "install"]
    # the one session.install is the helper's, with pip's output shown
    assert len(installs) == 1
    silent = {k.arg: k.value for k in installs[0].keywords}["silent"]
    assert isinstance(silent, ast.Constant) and silent.value is False
    # and no pip run of a session passes -q
    quiet = [c.lineno for c in calls if "pip" in _strings(c) and _strings(c) & {"-q", "--quiet"}]
    assert quiet == []
