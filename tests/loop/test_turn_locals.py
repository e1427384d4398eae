"""What a run holds while its next model call is in flight (issue 39: memory per
conversation): the last turn's answer is not kept alive by the loop."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import trio

from toolnexus_trio import (
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    ToolContext,
    Toolkit,
    create_in_process_client,
    define_tool,
)


async def test_the_last_answer_is_gone_while_the_next_model_call_runs() -> None:
    answers: list[weakref.ref[InProcessResponse]] = []
    alive_at_second_call: list[bool] = []

    async def generate(request: GenerateRequest) -> InProcessResponse:
        if request.turn == 0:
            answer = InProcessResponse(tool_calls=[InProcessToolCall(id="c", name="t")])
            answers.append(weakref.ref(answer))
            return answer
        gc.collect()  # no cycle keeps it either
        alive_at_second_call.append(answers[0]() is not None)
        await trio.lowlevel.checkpoint()
        return InProcessResponse(content="done")

    async def t(args: dict[str, Any], ctx: ToolContext) -> str:
        return "ok"

    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    result = await client.run("go", Toolkit([define_tool("t", "", None, t)]))
    assert result.status == "done"
    assert alive_at_second_call == [False]


async def test_a_streamed_run_holds_no_last_answer_either() -> None:
    answers: list[weakref.ref[InProcessResponse]] = []
    alive_at_second_call: list[bool] = []

    async def generate(request: GenerateRequest) -> InProcessResponse:
        if request.turn == 0:
            answer = InProcessResponse(tool_calls=[InProcessToolCall(id="c", name="t")])
            answers.append(weakref.ref(answer))
            return answer
        gc.collect()
        alive_at_second_call.append(answers[0]() is not None)
        return InProcessResponse(content="done")

    async def t(args: dict[str, Any], ctx: ToolContext) -> str:
        return "ok"

    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    async with client.stream("go", Toolkit([define_tool("t", "", None, t)])) as events:
        kinds = [event["type"] async for event in events]
    assert kinds[-1] == "done"
    assert alive_at_second_call == [False]
