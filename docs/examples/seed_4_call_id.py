"""Seed example 4: ``call_id`` tells sibling calls apart.

A tool run by the client loop gets ``ctx.call_id`` = the model's id for that call
(``None`` outside the loop). One message's calls run concurrently.
"""

from typing import Any

import trio

from toolnexus_trio import (
    BuiltinsConfig,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    ToolContext,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    define_tool,
)


async def main() -> None:
    seen: list[str] = []

    async def probe_fn(args: dict[str, Any], ctx: ToolContext) -> str:
        seen.append(ctx.call_id or "direct")
        print(f"probe running as call {ctx.call_id}")
        await trio.sleep(0.01)  # both calls are in flight here at once
        return f"I was {ctx.call_id}"

    probe = define_tool("probe", "records its call id", None, probe_fn)

    async def generate(req: GenerateRequest) -> InProcessResponse:
        if any(m["role"] == "tool" for m in req.messages):
            return InProcessResponse(content="done")
        calls = [InProcessToolCall(id=i, name="probe") for i in ("call_a", "call_b")]
        return InProcessResponse(tool_calls=calls)

    options = ToolkitOptions(extra_tools=[probe], builtins=BuiltinsConfig.off())
    async with await create_toolkit(options) as toolkit:
        client = create_in_process_client(InProcessOptions(model="scripted", generate=generate))
        result = await client.run("probe twice", toolkit)
    for call in result.tool_calls:
        print(f"tool result for {call.id}: {call.output}")


if __name__ == "__main__":
    trio.run(main)
