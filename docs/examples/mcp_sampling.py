"""MCP sampling and relayed elicitation: an MCP server asks our model, and asks the user
of whoever called it, through one hop and through ``serve``.

1. A toolkit loads an MCP server written with the official SDK (this same file, run
   with ``--server``) whose ``summarize`` tool asks the client's model
   (``sampling/createMessage``) and whose ``ask`` tool asks the user (elicitation).
   ``ToolkitOptions(sample=...)`` answers the sampling with an in-process model.
2. The toolkit is served over MCP; the SDK's own client, which samples and elicits,
   calls through both hops: the inner server's requests are relayed to it.

Needs the extra: ``pip install -e '.[mcp]'``. The test suite runs this script.
"""

from __future__ import annotations

import sys
from typing import Any

import mcp_types as types
import trio
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from toolnexus_trio import (
    GenerateRequest,
    SamplingLimits,
    ToolkitOptions,
    open_toolkit,
    sampler_from_generate,
)


class Name(BaseModel):
    name: str


def run_inner_server() -> None:
    """The innermost MCP server: the SDK's MCPServer, over stdio."""
    import warnings

    from mcp.shared.exceptions import MCPDeprecationWarning

    # The 2026-07-28 revision deprecates sampling; this server speaks the handshake era.
    warnings.simplefilter("ignore", MCPDeprecationWarning)
    server = MCPServer("inner")

    @server.tool(structured_output=False)
    async def summarize(text: str, ctx: Context) -> str:
        """Summarise the text with the client's model."""
        message = types.SamplingMessage(
            role="user", content=types.TextContent(type="text", text=text)
        )
        result = await ctx.session.create_message([message], max_tokens=2000)
        return f"summary: {result.content.text}"  # type: ignore[union-attr]

    @server.tool(structured_output=False)
    async def ask(ctx: Context) -> str:
        """Ask the user for a name (form elicitation)."""
        answer = await ctx.elicit("Who is asking?", schema=Name)
        return f"hello {answer.data.name}" if answer.action == "accept" else answer.action

    server.run("stdio")


async def tiny_model(request: GenerateRequest) -> dict[str, Any]:
    """A stand-in for a real model: the first words of the last message."""
    await trio.lowlevel.checkpoint()
    words = str(request.messages[-1]["content"]).split()
    return {
        "content": " ".join(words[:3]) + f" (max {request.max_tokens} tokens)",
        "usage": {"completion_tokens": 3},
    }


async def main() -> None:
    inner = {"command": [sys.executable, __file__, "--server"]}
    options = ToolkitOptions(
        mcp={"inner": inner},
        sample=sampler_from_generate(tiny_model, model="tiny"),
        sampling_limits=SamplingLimits(max_tokens=256),  # the server asked for 2000
        relay_to_client=True,  # advertise elicitation too, for serve to relay it
        builtins=False,
    )
    async with open_toolkit(options) as toolkit:
        # One hop: our sampler answers the server.
        result = await toolkit.execute("inner_summarize", {"text": "Trio is a friendly library"})
        # The server asked for 2000 tokens; SamplingLimits capped the request at 256.
        print("one hop, our sampler answered:", result.output)

        # Two hops: the SDK client outside samples and elicits; the requests reach it.
        async def outer_sample(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
            await trio.lowlevel.checkpoint()
            return types.CreateMessageResult(
                role="assistant",
                content=types.TextContent(type="text", text="from the outer client's model"),
                model="outer",
            )

        async def outer_elicit(ctx: Any, params: Any) -> Any:
            await trio.lowlevel.checkpoint()
            print("the outer client is asked:", params.message)
            return types.ElicitResult(action="accept", content={"name": "Ada"})

        async with (
            toolkit.serve() as served,
            Client(
                served.url,
                mode="legacy",
                sampling_callback=outer_sample,
                elicitation_callback=outer_elicit,
            ) as client,
        ):
            summary = await client.call_tool("inner_summarize", {"text": "anything"})
            text = summary.content[0].text  # type: ignore[union-attr]
            print("two hops, the outer client's model answered:", text)
            hello = await client.call_tool("inner_ask", {})
            text = hello.content[0].text  # type: ignore[union-attr]
            print("two hops, the outer client's user answered:", text)


if __name__ == "__main__":
    if "--server" in sys.argv:
        run_inner_server()
    else:
        trio.run(main)
