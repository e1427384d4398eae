"""Content parts in the loop itself (the in-process client: no wire style)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

import toolnexus_trio as tn
from toolnexus_trio import (
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    ToolResult,
    create_in_process_client,
    define_tool,
)

PNG = pathlib.Path(__file__).parents[1] / "fixtures" / "media" / "fixture.png"
PICTURE = tn.image(PNG)


async def _snap(args: dict[str, Any], ctx: Any) -> ToolResult:
    return ToolResult("took one", parts=[PICTURE])


async def _toolkit() -> tn.Toolkit:
    snap = define_tool("snap", "Snap.", None, _snap)
    return await tn.create_toolkit(
        tn.ToolkitOptions(extra_tools=[snap], builtins=tn.BuiltinsConfig.off())
    )


async def test_generate_sees_the_tool_parts_beside_a_text_transcript() -> None:
    seen: list[dict[str, Any] | None] = []

    async def generate(request: GenerateRequest) -> InProcessResponse:
        # Live, like messages (not copied per call): a snapshot is kept here.
        seen.append(None if request.parts is None else dict(request.parts))
        if request.turn < 2:
            return InProcessResponse("", (InProcessToolCall(f"c{request.turn}", "snap", {}),))
        return InProcessResponse("done")

    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    result = await client.run("look", await _toolkit())
    assert result.status == "done"
    first, second, third = seen
    assert first is None
    assert second is not None and list(second) == ["c0"]
    assert third is not None and list(third) == ["c0", "c1"]
    # One part object, held once whatever the number of turns: never re-encoded.
    assert third["c0"][0] is PICTURE and third["c1"][0] is PICTURE
    assert PICTURE.data is not None and PICTURE.data not in json.dumps(result.messages)


async def test_an_in_process_client_caps_the_prompts_parts() -> None:
    async def generate(request: GenerateRequest) -> InProcessResponse:
        raise AssertionError("never called")

    client = create_in_process_client(
        InProcessOptions(model="m", generate=generate, max_part_bytes=81)
    )
    with pytest.raises(tn.ContentPartError, match="limit of 81"):
        await client.run([tn.text("look"), PICTURE])
    with pytest.raises(TypeError, match="list of parts"):
        await client.run(b"bytes")  # type: ignore[arg-type]


def test_the_transcript_estimate_counts_a_part_by_its_bytes() -> None:
    # peer: test_token_estimate_is_byte_derived_not_mime_derived (the transcript side:
    # compaction's estimate counts a part's bytes, not its base64 as text)
    big = tn.file(b"\0" * 750_000, mime_type="application/pdf")
    plain = tn.estimate_tokens([{"role": "user", "content": [tn.text("see").to_dict()]}])
    with_part = tn.estimate_tokens(
        [{"role": "user", "content": [tn.text("see").to_dict(), big.to_dict()]}]
    )
    assert with_part == plain + 1000


async def test_a_resumed_calls_parts_reach_the_next_request() -> None:
    async def approved_snap(args: dict[str, Any], ctx: Any) -> ToolResult:
        if ctx.answer is None:
            return tn.pending(tn.Request(kind="approval", prompt="take a picture?"))
        return ToolResult("took one", parts=[PICTURE])

    seen: list[dict[str, Any] | None] = []

    async def generate(request: GenerateRequest) -> InProcessResponse:
        seen.append(None if request.parts is None else dict(request.parts))
        if request.turn == 0:
            return InProcessResponse("", (InProcessToolCall("c0", "snap", {}),))
        return InProcessResponse("done")

    snap = define_tool("snap", "Snap.", None, approved_snap)
    toolkit = await tn.create_toolkit(
        tn.ToolkitOptions(extra_tools=[snap], builtins=tn.BuiltinsConfig.off())
    )
    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    halted = await client.run("look", toolkit)
    assert halted.status == "pending"
    assert halted.pending is not None
    result = await client.resume(halted, [tn.Answer(halted.pending.id, True)], toolkit=toolkit)
    assert result.status == "done"
    assert seen[-1] == {"c0": (PICTURE,)}
