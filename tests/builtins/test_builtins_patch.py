"""``apply_patch``: all or nothing, composition, confinement, a cancel mid-apply."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from toolnexus_trio import ToolContext, ToolkitOptions, ToolResult, create_toolkit
from toolnexus_trio.builtins import BuiltinsConfig, _files, _patch


def _patch_text(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"])


async def _apply(base: Path, text: str, ctx: ToolContext | None = None) -> ToolResult:
    toolkit = await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig(base_dir=base)))
    return await toolkit.execute("apply_patch", {"patchText": text}, ctx)


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text() if p.is_file() else "<dir>"
        for p in sorted(root.rglob("*"))
    }


BIG = _patch_text(
    "*** Add File: new/one.txt", "+one",
    "*** Update File: keep.txt", "@@", " a", "-b", "+B",
    "*** Delete File: gone.txt",
    "*** Update File: other.txt", "*** Move to: moved/other.txt", "-x", "+X",
)  # fmt: skip


def _seed(root: Path) -> dict[str, str]:
    (root / "keep.txt").write_text("a\nb\nc\n")
    (root / "gone.txt").write_text("bye\n")
    (root / "other.txt").write_text("x\n")
    return _tree(root)


async def test_a_multi_file_patch_applies(tmp_path: Path) -> None:
    _seed(tmp_path)
    result = await _apply(tmp_path, BIG)
    assert result == ToolResult.ok(
        "Applied patch: 4 file operations", {"added": 1, "updated": 2, "deleted": 1}
    )
    assert _tree(tmp_path) == {
        "keep.txt": "a\nB\nc\n", "moved": "<dir>", "moved/other.txt": "X\n",
        "new": "<dir>", "new/one.txt": "one",
    }  # fmt: skip


@pytest.mark.parametrize("fail_at", [1, 2, 3])
async def test_a_failure_while_committing_puts_everything_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    before = _seed(tmp_path)
    real_replace = os.replace
    calls = {"n": 0}

    def flaky_replace(src: str, dst: str) -> None:
        calls["n"] += 1
        if calls["n"] == fail_at:
            raise OSError(5, "Input/output error", dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky_replace)
    result = await _apply(tmp_path, BIG)
    assert result.is_error and "Input/output error" in result.output
    monkeypatch.setattr(os, "replace", real_replace)
    assert _tree(tmp_path) == before  # no new file, directory, temporary or backup left


async def test_a_failure_while_staging_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _seed(tmp_path)
    real_stage = _files.stage
    staged = {"n": 0}

    def failing_stage(*args: Any) -> str:
        staged["n"] += 1
        if staged["n"] == 3:
            raise OSError(28, "No space left on device")
        return real_stage(*args)

    monkeypatch.setattr(_patch, "stage", failing_stage)
    result = await _apply(tmp_path, BIG)
    assert result == ToolResult.error("apply_patch: [Errno 28] No space left on device")
    assert _tree(tmp_path) == before


async def test_cancel_mid_apply_waits_for_a_whole_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The patch runs in a worker thread that is not abandoned: a cancel returns only
    # once the patch has been applied whole (or not at all), never half, and the
    # result says which.
    _seed(tmp_path)
    gate, entered = threading.Event(), threading.Event()
    real_commit = _patch.commit

    def gated_commit(plan: Any) -> None:
        entered.set()
        gate.wait(10)
        real_commit(plan)

    monkeypatch.setattr(_patch, "commit", gated_commit)
    ctx = ToolContext()
    results: list[ToolResult] = []

    async def call() -> None:
        results.append(await _apply(tmp_path, BIG, ctx))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await trio.to_thread.run_sync(entered.wait)
            ctx.cancel.cancel()
            await trio.sleep(0.05)
            assert results == []  # still waiting for the thread
            gate.set()
    assert results == [
        ToolResult.ok("Applied patch: 4 file operations", {"added": 1, "updated": 2, "deleted": 1})
    ]
    assert _tree(tmp_path)["keep.txt"] == "a\nB\nc\n"  # applied whole
    assert not [name for name in _tree(tmp_path) if name.endswith((".tmp", ".old"))]


@pytest.mark.parametrize(
    "lines",
    [
        ["*** Add File: ../escape.txt", "+x"],
        ["*** Update File: keep.txt", "*** Move to: ../escape.txt", "-a", "+A"],
        ["*** Add File: link/escape.txt", "+x"],
        ["*** Delete File: link/outside.txt"],
    ],
)
async def test_confinement(tmp_path: Path, lines: list[str]) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "keep.txt").write_text("a\n")
    (tmp_path / "outside.txt").write_text("o")
    (base / "link").symlink_to(tmp_path)
    result = await _apply(base, _patch_text(*lines))
    assert result.is_error and "resolves outside baseDir" in result.output
    assert [name for name in _tree(tmp_path) if "/" not in name] == ["base", "outside.txt"]
    assert (base / "keep.txt").read_text() == "a\n"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["*** Update File: keep.txt", "@@", " a", "xb"], "unexpected line: xb"),
        (["*** Delete File: keep.txt", "+x"], "unexpected line: +x"),
        (["*** Update File: keep.txt", "*** Move to: ", "-a"], "unexpected line: *** Move to: "),
        (["*** Add File: twice.txt", "+1", "*** Add File: twice.txt", "+2"],
         "file already exists: {base}/twice.txt"),
        (["*** Delete File: keep.txt", "*** Delete File: keep.txt"],
         "file not found: {base}/keep.txt"),
        (["*** Update File: keep.txt", "*** End of File", "-zz"],
         "hunk does not match file contents"),
    ],
)  # fmt: skip
async def test_malformed_patches_change_nothing(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    (tmp_path / "keep.txt").write_text("a\nb\n")
    result = await _apply(tmp_path, _patch_text(*lines))
    assert result == ToolResult.error("apply_patch: " + message.format(base=tmp_path))
    assert _tree(tmp_path) == {"keep.txt": "a\nb\n"}


def test_hunks_in_memory() -> None:
    hunk = _patch.Hunk
    assert _patch.apply_hunks("", (hunk(None, (), ("x",), False),)) == "x"
    assert _patch.apply_hunks("a\nb\n", (hunk("a", (), ("i",), False),)) == "a\ni\nb\n"
    at_end = (hunk(None, ("a",), ("A",), True),)
    assert _patch.apply_hunks("a\nb\na\n", at_end) == "a\nb\nA\n"
    with pytest.raises(_patch.BuiltinError):
        _patch.apply_hunks("a\nb\n", at_end)
