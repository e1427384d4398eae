"""A tool may declare the result recorded for it when its call is cancelled
(``ToolContext.cancelled_result``), the cancel still propagating: what the A2A tools use
for SPEC §7A's ``"A2A task <id> canceled"``. On the virtual clock."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from toolnexus_trio import (
    CancelToken,
    Hooks,
    InProcessOptions,
    ToolContext,
    Toolkit,
    ToolResult,
    create_in_process_client,
    define_tool,
)
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall

DECLARED = ToolResult.error("job 7 canceled", {"state": "canceled"})


class Slow:
    """A tool that waits forever, declaring its cancelled result; counts the cancels."""

    def __init__(self, declare: bool = True) -> None:
        self.started = trio.Event()
        self.cancelled = 0

        async def run(args: dict[str, Any], ctx: ToolContext) -> str:
            self.started.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                self.cancelled += 1
                if declare:
                    ctx.cancelled_result = DECLARED
                raise
            raise AssertionError("unreachable")

        self.tool = define_tool("slow", "waits", {"type": "object"}, run)


async def calls_slow(request: GenerateRequest) -> InProcessResponse:
    if any(m["role"] == "tool" for m in request.messages):
        return InProcessResponse(content="after")
    return InProcessResponse(tool_calls=(InProcessToolCall("s1", "slow", {}),))


@pytest.mark.parametrize("hooked", [False, True], ids=["direct", "hooked"])
async def test_a_cancelled_call_records_what_its_tool_declared(
    hooked: bool, autojump_clock: trio.testing.MockClock
) -> None:
    slow = Slow()
    # A tool hook takes the loop's other path (one task per call with its hooks).
    hooks = Hooks(before_tool=lambda event: None) if hooked else None
    client = create_in_process_client(InProcessOptions(model="m", generate=calls_slow, hooks=hooks))
    token = CancelToken()
    async with trio.open_nursery() as nursery:

        async def stop() -> None:
            await slow.started.wait()
            token.cancel("stop")

        nursery.start_soon(stop)
        result = await client.run("go", Toolkit([slow.tool]), cancel=token)
    assert result.status == "cancelled" and slow.cancelled == 1
    [record] = result.tool_calls
    assert (record.output, record.is_error, record.metadata) == (
        "job 7 canceled",
        True,
        {"state": "canceled"},
    )
    assert result.messages[-1] == {
        "role": "tool",
        "tool_call_id": "s1",
        "content": "job 7 canceled",
    }


async def test_without_a_declaration_the_loop_records_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slow = Slow(declare=False)
    client = create_in_process_client(InProcessOptions(model="m", generate=calls_slow))
    token = CancelToken()
    async with trio.open_nursery() as nursery:

        async def stop() -> None:
            await slow.started.wait()
            token.cancel("stop")

        nursery.start_soon(stop)
        result = await client.run("go", Toolkit([slow.tool]), cancel=token)
    assert [r.output for r in result.tool_calls] == ["cancelled"]


async def test_an_enclosing_cancel_still_propagates(autojump_clock: trio.testing.MockClock) -> None:
    slow = Slow()
    client = create_in_process_client(InProcessOptions(model="m", generate=calls_slow))
    with trio.move_on_after(5) as scope:
        await client.run("go", Toolkit([slow.tool]))
    assert scope.cancelled_caught and slow.cancelled == 1


async def test_tool_call_returns_the_declared_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slow = Slow()
    token = CancelToken()
    box: list[ToolResult] = []
    async with trio.open_nursery() as nursery:

        async def call() -> None:
            box.append(await slow.tool.call({}, ToolContext(cancel=token)))

        nursery.start_soon(call)
        await slow.started.wait()
        token.cancel("stop")
    assert box == [DECLARED]
