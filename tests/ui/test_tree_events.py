"""One stream of typed events for a whole agent tree (:func:`toolnexus_trio.ui.stream_tree`):
the root's loop, a helper spawned by ``delegate``, the helper's tool call and approval,
all through one size-0 channel."""

from __future__ import annotations

import trio

from toolnexus_trio import Answer, Request, ToolContext, ToolResult, pending, tool
from toolnexus_trio.loop import (
    AgentFinished,
    AgentSpawned,
    AgentStateChanged,
    ApprovalAnswered,
    ApprovalRequested,
    RunEvent,
    RunFinished,
    ToolCallFinished,
    ToolCallStarted,
)
from toolnexus_trio.models import ClientOptions
from toolnexus_trio.testing import open_fake_provider
from toolnexus_trio.ui import stream_tree


@tool
async def launch(ctx: ToolContext, target: str) -> ToolResult:
    """Launch at *target*, once approved."""
    if ctx.answer is None:
        return pending(Request(kind="approval", prompt=f"launch at {target}?"))
    return ToolResult.ok(f"launched {target}")


async def test_one_stream_for_a_tree_with_a_helpers_approval() -> None:
    script = [
        {"tool_calls": [{"name": "delegate", "arguments": {"prompt": "launch"}, "id": "d1"}]},
        {"tool_calls": [{"name": "launch", "arguments": {"target": "moon"}, "id": "l1"}]},
        {"text": "the moon is launched"},
        {"text": "done: the moon is launched"},
    ]
    asked: list[tuple[str, str]] = []

    async def wait_for(agent: str, request: Request) -> Answer:
        asked.append((agent, request.prompt))
        return Answer(request.id, True)

    seen: list[RunEvent] = []
    with trio.fail_after(20):
        async with open_fake_provider(script) as provider:
            llm = ClientOptions(base_url=provider.base_url, style="openai", model="m", api_key="k")
            send, receive = trio.open_memory_channel[RunEvent](0)
            async with trio.open_nursery() as nursery:

                async def produce() -> None:
                    async with send:
                        await stream_tree(llm, "go", send.send, [launch], wait_for=wait_for)

                nursery.start_soon(produce)
                seen.extend([event async for event in receive])
    helper = "root/helper.1"
    assert asked == [(helper, "launch at moon?")]
    spawned = [e for e in seen if isinstance(e, AgentSpawned)]
    assert [(e.agent, e.parent, e.name) for e in spawned] == [(helper, "root", "helper")]
    assert spawned[0].budget == {"max_turns": 20, "max_tool_calls": 50}
    states = [e.state for e in seen if isinstance(e, AgentStateChanged)]
    assert states == ["running", "suspended", "running"]
    kinds = [type(e) for e in seen]
    # The approval sits between the helper's suspended and running states.
    assert kinds.index(ApprovalRequested) < kinds.index(ApprovalAnswered)
    assert seen[kinds.index(ApprovalRequested)].agent == helper
    starts = [(e.agent, e.id, e.name) for e in seen if isinstance(e, ToolCallStarted)]
    assert starts == [("root", "d1", "delegate"), (helper, f"{helper}:l1", "launch")]
    done = [(e.agent, e.output) for e in seen if isinstance(e, ToolCallFinished)]
    assert done == [(helper, "launched moon"), ("root", "the moon is launched")]
    finished = [e for e in seen if isinstance(e, AgentFinished)]
    assert [(e.agent, e.status) for e in finished] == [(helper, "done")]
    assert isinstance(seen[-1], RunFinished) and seen[-1].text == "done: the moon is launched"
