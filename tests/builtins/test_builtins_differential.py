"""Our builtins against the released port (toolnexus 0.21.0), case by case.

The peer's schemas and answers are pinned in tests/fixtures (``builtin_schemas.json``,
``builtin_peer_outputs.json``), recorded by ``tests/fixtures/make_builtin_fixtures.py``
from the inputs in ``tests/fixtures/builtin_cases.py``. Every case must give the
peer's output, error flag, metadata and files, except the cases marked ``deviation``:
there ours fixes a defect of the peer, gives the answer the case states, and
docs/builtins.rst names the deviation.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from builtin_helpers import open_route_server

from toolnexus_trio import ToolkitOptions, create_toolkit
from toolnexus_trio.builtins import BUILTIN_ORDER, BuiltinsConfig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "builtins.rst"


def _load_cases() -> Any:
    spec = importlib.util.spec_from_file_location("builtin_cases", FIXTURES / "builtin_cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES_MODULE = _load_cases()
CASES: list[dict[str, Any]] = CASES_MODULE.CASES
PEER = json.loads((FIXTURES / "builtin_peer_outputs.json").read_text("utf-8"))["cases"]


def _substitute(value: Any, table: dict[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in table.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [_substitute(v, table) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, table) for k, v in value.items()}
    return value


def _setup(case: dict[str, Any], base: Path) -> None:
    base.mkdir()
    for rel in case.get("dirs", []):
        (base / rel).mkdir(parents=True)
    for rel, content in case.get("files", {}).items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(content)
    for rel, target in case.get("symlinks", {}).items():
        os.symlink(target, base / rel)


def _snapshot(case: dict[str, Any], base: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rel in case.get("snapshot", []):
        path = base / rel
        if path.is_dir():
            out[rel] = "<dir>"
        elif not path.exists():
            out[rel] = "<missing>"
        else:
            data = path.read_bytes()
            try:
                out[rel] = data.decode("utf-8")
            except UnicodeDecodeError:
                out[rel] = {"base64": base64.b64encode(data).decode("ascii")}
    return out


def fresh_dir(prefix: str) -> Path:
    """A new temporary directory, by its real path (outputs name it ``<TMP>``)."""
    return Path(os.path.realpath(tempfile.mkdtemp(prefix=prefix)))


async def _run(case: dict[str, Any], base_url: str) -> dict[str, Any]:
    tmp = fresh_dir("tn-ours-")
    try:
        base = tmp / "base"
        _setup(case, base)
        toolkit = await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig(base_dir=base)))
        args = _substitute(case["args"], {"<TMP>": str(tmp), "<BASE>": base_url})
        result = await toolkit.execute(case["tool"], args)
        back = {str(tmp): "<TMP>", base_url: "<BASE>"}
        metadata = result.metadata if case.get("compare_metadata", True) else None
        return {
            "output": CASES_MODULE.summarize(_substitute(result.output, back)),
            "is_error": result.is_error,
            "metadata": _substitute(json.loads(json.dumps(metadata, default=str)), back),
            "files": _snapshot(case, base),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_every_case_was_recorded() -> None:
    assert sorted(PEER) == sorted(c["id"] for c in CASES)
    assert len({c["id"] for c in CASES}) == len(CASES)


async def test_schemas_and_order_are_byte_identical_to_the_peer() -> None:
    expected = json.loads((FIXTURES / "builtin_schemas.json").read_text("utf-8"))
    toolkit = await create_toolkit()
    assert [t.name for t in toolkit.tools()] == list(expected) == list(BUILTIN_ORDER)
    for tool in toolkit.tools():
        compact = json.dumps(tool.input_schema, separators=(",", ":"), ensure_ascii=False)
        assert compact == json.dumps(expected[tool.name], separators=(",", ":")), tool.name


async def test_outputs_match_the_peer() -> None:
    mismatches = []
    async with open_route_server(CASES_MODULE.ROUTES) as base_url:
        for case in CASES:
            if "deviation" in case:
                continue
            ours = await _run(case, base_url)
            if ours != PEER[case["id"]]:
                mismatches.append((case["id"], ours, PEER[case["id"]]))
    assert mismatches == []


async def test_deviations_fix_the_peer_and_are_documented() -> None:
    docs = DOCS.read_text("utf-8")
    wrong = []
    async with open_route_server(CASES_MODULE.ROUTES) as base_url:
        for case in CASES:
            deviation = case.get("deviation")
            if deviation is None:
                continue
            assert f"_dev-{deviation['doc']}:" in docs, deviation["doc"]
            ours = await _run(case, base_url)
            expected = {"files": {}, **deviation["ours"]}
            expected["output"] = CASES_MODULE.summarize(expected["output"])
            if ours != expected or ours == PEER[case["id"]]:
                wrong.append((case["id"], ours, expected))
    assert wrong == []


def test_public_names_of_the_builtins_package() -> None:
    import toolnexus_trio
    import toolnexus_trio.builtins as package

    assert set(package.__all__) == {
        "BUILTIN_ORDER", "DEFAULT_SHELL", "KILL_GRACE_SECONDS", "builtin_shell", "MAX_FETCH_BYTES", "MAX_FILE_BYTES",
        "OUTPUT_LIMIT", "BuiltinsConfig", "builtin_tools", "render_questions", "strip_html",
        "truncation_marker",
    }  # fmt: skip
    assert package.BuiltinsConfig is toolnexus_trio.BuiltinsConfig
    assert package.BuiltinsConfig.__module__ == "toolnexus_trio.builtins"


@pytest.mark.parametrize("name", ["read", "write", "edit", "glob", "grep", "apply_patch"])
def test_every_file_tool_has_a_confinement_case(name: str) -> None:
    assert any(c["tool"] == name and c.get("confine") for c in CASES)
