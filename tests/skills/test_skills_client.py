"""The client puts ``system_prompt + "\\n\\n" + toolkit.skills_prompt()`` first (SPEC §8
step 1), for the in-process client and for both HTTP wire styles, and a model loads a
skill through the loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from http_helpers import STYLES, served

from toolnexus_trio import (
    BuiltinsConfig,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    SkillDef,
    Toolkit,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.skills import NO_SKILLS_PROMPT

CATALOG = (
    "Skills provide specialized instructions and workflows for specific tasks.\n"
    "Use the skill tool to load a skill when a task matches its description.\n\n"
    "## Available Skills\n- **greet**: Say hello"
)
GREET = SkillDef(name="greet", content="Say hello warmly.", description="Say hello")


async def kit(**kw: Any) -> Toolkit:
    return await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig.off(), **kw))


async def first_messages(
    system_prompt: str | None, toolkit: Toolkit | None, history: list[Any] | None = None
) -> list[dict[str, Any]]:
    seen: list[list[dict[str, Any]]] = []

    async def generate(req: GenerateRequest) -> InProcessResponse:
        seen.append([dict(m) for m in req.messages])
        return InProcessResponse(content="ok")

    client = create_in_process_client(
        InProcessOptions(model="m", generate=generate, system_prompt=system_prompt)
    )
    await client.run("hi", toolkit, history=history)
    return seen[0]


@pytest.mark.parametrize(
    ("system_prompt", "skills", "expected"),
    [
        ("SYS", [GREET], "SYS\n\n" + CATALOG),
        (None, [GREET], CATALOG),
        ("", [GREET], CATALOG),
        ("SYS", None, "SYS"),
        (None, None, None),
        ("SYS", [], "SYS\n\n" + NO_SKILLS_PROMPT),  # a configured but empty source
    ],
)
async def test_in_process_system_message(
    tmp_path: Path, system_prompt: str | None, skills: list[SkillDef] | None, expected: str | None
) -> None:
    if skills is None:
        toolkit = await kit()
    elif skills:
        toolkit = await kit(skills=skills)
    else:
        toolkit = await kit(skills_dir=tmp_path)  # an empty folder
    messages = await first_messages(system_prompt, toolkit)
    if expected is None:
        assert messages == [{"role": "user", "content": "hi"}]
    else:
        assert messages == [
            {"role": "system", "content": expected},
            {"role": "user", "content": "hi"},
        ]


async def test_no_toolkit_and_history_keep_their_old_behaviour() -> None:
    assert (await first_messages("SYS", None))[0] == {"role": "system", "content": "SYS"}
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "yes"}]
    messages = await first_messages("SYS", await kit(skills=[GREET]), history)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]


@pytest.mark.parametrize("style", STYLES)
async def test_http_clients_send_the_catalog(style: str) -> None:
    toolkit = await kit(skills=[GREET])
    async with served(style, [{"text": "ok"}], system_prompt="SYS") as (provider, client):
        await client.run("hi", toolkit)
    sent = provider.requests[0].json
    if style == "openai":
        assert sent["messages"][0] == {"role": "system", "content": "SYS\n\n" + CATALOG}
    else:
        assert sent["system"] == "SYS\n\n" + CATALOG
    tools = sent["tools"]
    assert [t["function"]["name"] if style == "openai" else t["name"] for t in tools] == ["skill"]


async def test_a_model_loads_a_skill_through_the_loop() -> None:
    async def generate(req: GenerateRequest) -> InProcessResponse:
        if any(m["role"] == "tool" for m in req.messages):
            return InProcessResponse(content="loaded")
        return InProcessResponse(
            tool_calls=[InProcessToolCall(name="skill", arguments={"name": "greet"})]
        )

    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    result = await client.run("say hi", await kit(skills=[GREET]))
    record = result.tool_calls[0]
    assert record.output.startswith('<skill_content name="greet">\n# Skill: greet\n\nSay hello')
    assert record.metadata == {"name": "greet", "dir": "skill://greet/"}
    assert result.text == "loaded"
