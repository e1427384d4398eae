"""Trace context through A2A: the calling agent's tool span reaches the served agent's
run in HTTP headers (W3C traceparent), so the remote run is its child."""

from __future__ import annotations

from typing import Any

from a2a_helpers import served_agent
from otel_helpers import attrs_of, global_recorder, parent_of

from toolnexus_trio import (
    GenerateRequest,
    InProcessOptions,
    InProcessToolCall,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.a2a import A2AServeConfig, agent


async def test_an_a2a_call_carries_the_trace_both_ways() -> None:
    async def generate(req: GenerateRequest) -> dict[str, Any]:
        if any(m.get("role") == "tool" for m in req.messages):
            return {"content": "relayed"}
        call = InProcessToolCall(id="a1", name="helper_echo", arguments={"task": "ping"})
        return {"tool_calls": [call]}

    with global_recorder() as rec:
        async with served_agent(A2AServeConfig(name="helper")) as (served, _, _, _):
            card = served.base_url + "/.well-known/agent-card.json"
            caller = await create_toolkit(
                ToolkitOptions(builtins=False, agents=[agent(card, poll_every=10)])
            )
            client = create_in_process_client(InProcessOptions(model="caller", generate=generate))
            async with caller:
                result = await client.run("ask the helper", caller)
    assert result.tool_calls[0].output == "echo: ping"
    tool = rec.one("execute_tool helper_echo")
    runs = rec.named("invoke_agent")
    assert len(runs) == 2
    remote = next(r for r in runs if parent_of(r) is not None)
    # The served agent's run is a child of the caller's tool call, in the same trace.
    assert parent_of(remote) == tool.context.span_id
    assert remote.context.trace_id == tool.context.trace_id
    assert attrs_of(rec.one("chat scripted"))["gen_ai.request.model"] == "scripted"
    assert parent_of(rec.one("chat scripted")) == remote.context.span_id
