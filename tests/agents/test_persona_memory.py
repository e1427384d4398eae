"""SPEC §7E: the file-backed ``memory`` tool (memory_tool)."""

from __future__ import annotations

import os
from pathlib import Path

import trio

from toolnexus_trio import Tool, ToolContext, ToolResult
from toolnexus_trio.agents import compose_soul, memory_tool

CAP = 2_097_152


async def call(tool: Tool, **args: object) -> ToolResult:
    return await tool.call(dict(args))


def test_the_tool_shape(tmp_path: Path) -> None:
    tool = memory_tool(tmp_path)
    assert tool.name == "memory"
    assert tool.input_schema["required"] == ["action", "text"]
    assert tool.input_schema["properties"]["target"]["enum"] == ["self", "user"]
    assert tool.input_schema["properties"]["action"]["enum"] == ["add", "replace", "remove"]
    assert "next session" in tool.description
    assert tool.concurrency_safe is False


async def test_add_appends_an_entry_to_memory_md_by_default(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_text("# notes\n\n- old", encoding="utf-8")
    result = await call(memory_tool(tmp_path), action="add", text="Likes tea")
    assert not result.is_error
    assert "MEMORY.md" in result.output
    assert (tmp_path / "MEMORY.md").read_text() == "# notes\n\n- old\n- Likes tea\n"


async def test_target_user_writes_user_md_and_creates_the_home(tmp_path: Path) -> None:
    home = tmp_path / "new-home"
    result = await call(memory_tool(home), action="add", target="user", text="Prefers dark roast")
    assert not result.is_error, result.output
    assert (home / "USER.md").read_text() == "- Prefers dark roast\n"
    assert not (home / "MEMORY.md").exists()


async def test_replace_swaps_the_substring(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_text("- Likes tea\n- Lives in Pune\n", encoding="utf-8")
    result = await call(memory_tool(tmp_path), action="replace", text="tea", **{"with": "coffee"})
    assert not result.is_error
    assert (tmp_path / "MEMORY.md").read_text() == "- Likes coffee\n- Lives in Pune\n"


async def test_remove_deletes_the_entry_and_its_bullet(tmp_path: Path) -> None:
    (tmp_path / "USER.md").write_text("- Likes tea\n- Lives in Pune\n", encoding="utf-8")
    tool = memory_tool(tmp_path)
    result = await call(tool, action="remove", target="user", text="Likes tea")
    assert not result.is_error
    assert (tmp_path / "USER.md").read_text() == "- Lives in Pune\n"
    # A substring inside a longer entry removes just that part.
    await call(tool, action="remove", target="user", text=" in Pune")
    assert (tmp_path / "USER.md").read_text() == "- Lives\n"


async def test_a_missing_substring_is_a_loud_error_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_text("- a\n", encoding="utf-8")
    tool = memory_tool(tmp_path)
    for action in ("replace", "remove"):
        result = await call(tool, action=action, text="nope", **{"with": "x"})
        assert result.is_error
        assert result.output == "not found in MEMORY.md: nope"
    missing = await call(tool, action="remove", target="user", text="x")
    assert missing.is_error and missing.output == "not found in USER.md: x"
    assert (tmp_path / "MEMORY.md").read_text() == "- a\n"
    assert not (tmp_path / "USER.md").exists()


async def test_a_call_without_text_is_refused(tmp_path: Path) -> None:
    # toolnexus 0.21 accepts this and writes an empty "- " entry: a deliberate difference.
    tool = memory_tool(tmp_path)
    result = await call(tool, action="add")
    assert result.is_error
    assert "text" in result.output
    direct = await tool.execute({"action": "add"}, ToolContext())
    assert direct.is_error and direct.output.startswith("memory: text is required")
    blank = await call(tool, action="add", text="   ")
    assert blank.is_error
    assert os.listdir(tmp_path) == []


async def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_text("- a\n", encoding="utf-8")
    tool = memory_tool(tmp_path)
    assert (await call(tool, action="replace", text="a")).output == (
        "memory: with is required for replace"
    )
    assert (await call(tool, action="bogus", text="a")).is_error
    assert (await call(tool, action="add", target="other", text="a")).is_error
    assert (tmp_path / "MEMORY.md").read_text() == "- a\n"


async def test_an_edit_that_would_pass_the_cap_is_refused(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_bytes(b"x" * (CAP - 4) + b"\n")
    result = await call(memory_tool(tmp_path), action="add", text="one more fact")
    assert result.is_error
    assert "bootstrap cap" in result.output
    assert (tmp_path / "MEMORY.md").stat().st_size == CAP - 3


async def test_a_symlink_out_of_the_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    outside = tmp_path / "elsewhere.md"
    outside.write_text("- keep\n", encoding="utf-8")
    (home / "MEMORY.md").symlink_to(outside)
    result = await call(memory_tool(home), action="add", text="leak")
    assert result.is_error and "outside the agent home" in result.output
    assert outside.read_text() == "- keep\n"


async def test_writes_are_atomic_and_keep_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_text("- a\n", encoding="utf-8")
    path.chmod(0o600)
    inode = path.stat().st_ino
    await call(memory_tool(tmp_path), action="add", text="b")
    assert path.stat().st_ino != inode  # replaced whole, never rewritten in place
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(os.listdir(tmp_path)) == ["MEMORY.md"]  # no temporary left behind


async def test_parallel_calls_lose_no_update(tmp_path: Path) -> None:
    tool = memory_tool(tmp_path)

    async def add(i: int) -> None:
        assert not (await call(tool, action="add", text=f"fact {i}")).is_error

    async with trio.open_nursery() as nursery:
        for i in range(10):
            nursery.start_soon(add, i)
    lines = (tmp_path / "MEMORY.md").read_text().splitlines()
    assert sorted(lines) == sorted(f"- fact {i}" for i in range(10))


async def test_writes_load_in_the_next_snapshot_only(tmp_path: Path) -> None:
    (tmp_path / "USER.md").write_text("- Name: Muthu\n", encoding="utf-8")
    before, _ = compose_soul(tmp_path)
    await call(memory_tool(tmp_path), action="add", target="user", text="Prefers dark roast")
    assert "dark roast" not in before  # the snapshot taken earlier is fixed
    after, _ = compose_soul(tmp_path)
    assert after == "## USER.md\n\n- Name: Muthu\n- Prefers dark roast"
