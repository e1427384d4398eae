"""SPEC §7E: agent_from_dir builds a Level-1 agent from a persona home."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolnexus_trio import ToolContext, define_tool
from toolnexus_trio.agents import Budget, agent_from_dir


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "ava"
    home.mkdir()
    (home / "SOUL.md").write_text("You are Ava.", encoding="utf-8")
    (home / "MEMORY.md").write_text("- Onboarded 2026-07.", encoding="utf-8")
    return home


def test_the_defaults(tmp_path: Path) -> None:
    home = _home(tmp_path)
    persona = agent_from_dir(home)
    definition = persona.definition
    assert persona.name == "ava"
    assert definition.description == f"persona agent from {home}"
    assert (
        definition.system_prompt
        == "## SOUL.md\n\nYou are Ava.\n\n## MEMORY.md\n\n- Onboarded 2026-07."
    )
    assert [t.name for t in definition.tools or ()] == ["memory"]
    assert definition.model == "inherit"


def test_options_tools_and_a_read_only_persona(tmp_path: Path) -> None:
    home = _home(tmp_path)

    async def now(args: dict[str, Any], ctx: ToolContext) -> str:
        return "15:00"

    clock = define_tool("clock", "the time", None, now)
    persona = agent_from_dir(
        home, name="ava-2", does="remembers", tools=[clock], model="m1", budget=Budget(max_turns=3)
    )
    assert persona.name == "ava-2"
    assert persona.definition.description == "remembers"
    assert [t.name for t in persona.definition.tools or ()] == ["memory", "clock"]
    assert persona.definition.model == "m1"
    assert persona.definition.budget == Budget(max_turns=3)
    read_only = agent_from_dir(home, memory=False)
    assert not read_only.definition.tools
    assert [
        t.name for t in agent_from_dir(home, memory=False, tools=[clock]).definition.tools or ()
    ] == ["clock"]


def test_the_snapshot_is_taken_when_the_agent_is_built(tmp_path: Path) -> None:
    home = _home(tmp_path)
    persona = agent_from_dir(home)
    (home / "USER.md").write_text("- Muthu", encoding="utf-8")
    assert "USER.md" not in persona.definition.system_prompt
    assert "## USER.md\n\n- Muthu" in agent_from_dir(home).definition.system_prompt


@pytest.mark.parametrize("option", ["soul", "soul_file", "uses"])
def test_the_home_is_the_soul_and_the_tools(tmp_path: Path, option: str) -> None:
    with pytest.raises(TypeError, match=option):
        agent_from_dir(_home(tmp_path), **{option: "x"})
