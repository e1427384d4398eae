"""Seed example 3: ``answer``, the second half of a suspension.

The first call suspends with ``pending(...)``; the loop asks ``wait_for``, then re-runs
the same call with ``ctx.answer`` set. A suspension must be the tool's whole
``ToolResult`` (it carries ``metadata["pending"]``), so this tool is a ``Tool`` literal.
"""

from typing import Any

import trio

from toolnexus_trio import (
    Answer,
    BuiltinsConfig,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    Tool,
    ToolContext,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_in_process_client,
    create_toolkit,
    empty_schema,
    pending,
)


async def confirm_execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if ctx.answer is not None and ctx.answer.ok:
        return ToolResult.ok("confirmed")
    if ctx.answer is not None:
        return ToolResult.error(f"declined: {ctx.answer.reason}")
    return pending(Request(kind="approval", prompt="Proceed?"))


async def generate(req: GenerateRequest) -> InProcessResponse:
    """Scripted model: call `confirm` once, then repeat the tool's answer."""
    last = req.messages[-1]
    if last["role"] == "tool":
        return InProcessResponse(content=f"tool said: {last['content']}")
    return InProcessResponse(tool_calls=[InProcessToolCall(name="confirm")])


async def approve_everything(request: Request) -> Answer:
    """The host's human-in-the-loop: approve every request."""
    print(f"wait_for: the tool asks {request.prompt!r} ({request.kind}); approving")
    return Answer(id=request.id, ok=True)


async def main() -> None:
    confirm = Tool(
        name="confirm",
        description="Ask first",
        input_schema=empty_schema(),
        source=ToolSource.CUSTOM,
        execute=confirm_execute,
    )
    options = ToolkitOptions(extra_tools=[confirm], builtins=BuiltinsConfig.off())
    async with await create_toolkit(options) as toolkit:
        client = create_in_process_client(
            InProcessOptions(model="scripted", generate=generate, wait_for=approve_everything)
        )
        result = await client.run("delete the build dir", toolkit)
    for call in result.tool_calls:
        print(f"tool {call.name}: {call.output}")
    print(f"model: {result.text}")


if __name__ == "__main__":
    trio.run(main)
