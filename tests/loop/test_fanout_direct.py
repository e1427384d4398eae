"""The fan-out's hot path: a call with no hook, gate or timeout runs in one coroutine of
the loop (issue 24), with the same results, order and containment as the general path."""

from __future__ import annotations

import sys
from typing import Any

import trio
from helpers import TaskCensus

from toolnexus_trio import (
    GenerateRequest,
    Hooks,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    ToolContext,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    define_tool,
)

N = 200


def _generate(n: int) -> Any:
    async def generate(req: GenerateRequest) -> InProcessResponse:
        if any(m.get("role") == "tool" for m in req.messages):
            return InProcessResponse(content="done")
        calls = [InProcessToolCall(id=f"c{i}", name="work", arguments={"i": i}) for i in range(n)]
        return InProcessResponse(tool_calls=calls)

    return generate


async def _work(args: dict[str, Any], ctx: ToolContext) -> Any:
    i = args["i"]
    await trio.sleep((N - i) / 1000)  # later calls finish first: order is the loop's job
    if i % 50 == 7:
        raise ValueError(f"bad {i}")
    return {"i": i, "call": ctx.call_id} if i % 2 else f"ok {i}"


async def test_fanout_results_in_call_order_a_raise_contained_no_task_left() -> None:
    client = create_in_process_client(InProcessOptions(model="m", generate=_generate(N)))
    async with await create_toolkit(
        ToolkitOptions(extra_tools=[define_tool("work", "", None, _work)], builtins=False)
    ) as toolkit:
        with TaskCensus() as census:
            result = await client.run("go", toolkit)
            census.assert_no_new_tasks()
    assert result.status == "done"
    assert [r.id for r in result.tool_calls] == [f"c{i}" for i in range(N)]
    for i, record in enumerate(result.tool_calls):
        if i % 50 == 7:
            assert (record.output, record.is_error) == (f"bad {i}", True)
        elif i % 2:
            assert (record.output, record.is_error) == (f'{{"i":{i},"call":"c{i}"}}', False)
        else:
            assert (record.output, record.is_error) == (f"ok {i}", False)
    assert 'toolnexus_tool_calls_total{tool="work",source="native",is_error="true"' in (
        client.metrics()
    )


async def _chain_of(seen: list[list[str]]) -> None:
    """The coroutine frames between Trio's scheduler and this one, outermost first."""
    names = []
    frame = sys._getframe()
    while frame is not None and "trio" not in frame.f_code.co_filename.split("/")[-3:-1]:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    seen.append(names[::-1])


async def test_a_plain_call_is_one_coroutine_of_the_loop_around_the_tool() -> None:
    seen: list[list[str]] = []

    async def probe(args: dict[str, Any], ctx: ToolContext) -> str:
        await _chain_of(seen)
        return "ok"

    async def generate(req: GenerateRequest) -> InProcessResponse:
        if any(m.get("role") == "tool" for m in req.messages):
            return InProcessResponse(content="done")
        return InProcessResponse(tool_calls=[InProcessToolCall(id="c0", name="probe")])

    tools = [define_tool("probe", "", None, probe)]
    async with await create_toolkit(ToolkitOptions(extra_tools=tools, builtins=False)) as tk:
        plain = create_in_process_client(InProcessOptions(model="m", generate=generate))
        await plain.run("go", tk)
        # A before_tool hook takes the general path, with the same result.
        hooked = create_in_process_client(
            InProcessOptions(model="m", generate=generate, hooks=Hooks(before_tool=lambda e: None))
        )
        result = await hooked.run("go", tk)
    assert result.tool_calls[0].output == "ok"
    # Each generation of a coroutine frame per call is held for the call's life and
    # scanned by the collector: the plain path keeps one, the tool's own below it.
    assert seen[0] == ["_direct_call", "probe", "_chain_of"], seen[0]
    assert len(seen[1]) > len(seen[0])
