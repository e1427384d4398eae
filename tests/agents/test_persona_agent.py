"""SPEC §7E: agent_from_dir builds a Level-1 agent from a persona home."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from toolnexus_trio import (
    GenerateRequest,
    InProcessResponse,
    InProcessToolCall,
    ToolContext,
    define_tool,
)
from toolnexus_trio.agents import Budget, Handle, agent, agent_from_dir, start_agent


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


def _soul_echo() -> tuple[list[str], Any]:
    systems: list[str] = []

    async def generate(request: GenerateRequest) -> InProcessResponse:
        await trio.lowlevel.checkpoint()
        if request.model == "lead":
            tools = [m for m in request.messages if m["role"] == "tool"]
            if not tools:
                call = InProcessToolCall("t1", "task", {"agent": "ava", "prompt": "hi"})
                return InProcessResponse(tool_calls=[call])
            return InProcessResponse(str(tools[0]["content"]))
        systems.append(str(request.messages[0]["content"]))
        return InProcessResponse("ok")

    return systems, generate


async def test_each_session_composes_the_home_as_it_is_then(tmp_path: Path) -> None:
    home = _home(tmp_path)
    spawned: list[str] = []

    async def on_spawn(h: Handle) -> None:
        assert h.defn is not None and "Muthu" in h.defn.system_prompt  # after composing
        spawned.append(h.id)

    persona = agent_from_dir(home, model="ava", on_spawn=on_spawn)
    lead = agent("lead", does="delegates", team=[persona], model="lead")
    systems, generate = _soul_echo()
    (home / "USER.md").write_text("- Muthu", encoding="utf-8")  # after the build
    await persona.run("hi", generate=generate)
    await lead.run("ask ava", generate=generate)  # a task delegation is a session too
    async with start_agent(persona, generate=generate) as started:
        started.runtime.wake(started.handle, "hi")
        await started.runtime.wait(started.handle)
    assert len(systems) == 3
    assert all("## USER.md\n\n- Muthu" in system for system in systems)
    assert spawned == ["root/ava.1", "root/lead.1/ava.1", "root/ava.1"]


async def test_a_home_broken_after_the_build_fails_the_session(tmp_path: Path) -> None:
    home = _home(tmp_path)
    persona = agent_from_dir(home)
    (home / "TOOLS.md").mkdir()
    _, generate = _soul_echo()
    with pytest.raises(ValueError, match="not a regular file"):
        async with start_agent(persona, generate=generate):
            pass
