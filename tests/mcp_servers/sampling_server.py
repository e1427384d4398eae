"""A real MCP server that asks its client for sampling, for the sampling tests: the
everything server's tools (elicitation among them) plus tools that sample.

Run over stdio (``python sampling_server.py``) or imported and served over streamable
HTTP in-process (:func:`build`). Sampling requests are sent as plain requests: the
SDK's ``create_message`` helper warns that sampling is deprecated in 2026-07-28.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import anyio
import mcp_types as types
from everything import build as build_everything
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata


def _sampling_params(text: str, max_tokens: int) -> types.CreateMessageRequestParams:
    return types.CreateMessageRequestParams(
        messages=[
            types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))
        ],
        max_tokens=max_tokens,
        system_prompt="Answer in one line.",
        model_preferences=types.ModelPreferences(hints=[types.ModelHint(name="small")]),
    )


async def _create_message(
    session: Any, params: types.CreateMessageRequestParams, related: Any
) -> str:
    """``sampling/createMessage`` sent as a plain request (the SDK's helper warns that
    sampling is deprecated in 2026-07-28); an error answer comes back as its text."""
    try:
        result = await session.send_request(
            types.CreateMessageRequest(params=params),
            types.CreateMessageResult,
            metadata=ServerMessageMetadata(related_request_id=related),
        )
    except MCPError as exc:
        return f"refused: {exc.error.message}"
    content = result.content
    text = content.text if isinstance(content, types.TextContent) else content.type
    return f"{text} [{result.model}]"


def build(name: str = "sampling") -> MCPServer:
    server = build_everything(name)
    cancelled: list[str] = []
    armed: dict[str, Any] = {}

    @server.tool(structured_output=False)
    async def summarize(text: str, ctx: Context, max_tokens: int = 100) -> str:
        """Ask the client's model (sampling) to summarise *text*."""
        return await _create_message(
            ctx.request_context.session, _sampling_params(text, max_tokens), ctx.request_id
        )

    @server.tool(structured_output=False)
    async def summarize_slow(tag: str, ctx: Context) -> str:
        """Sample; a cancel of this call while the client samples is recorded under *tag*."""
        try:
            return await _create_message(
                ctx.request_context.session, _sampling_params(tag, 50), ctx.request_id
            )
        except anyio.get_cancelled_exc_class():
            cancelled.append(tag)
            raise

    @server.tool(structured_output=False)
    def arm(ctx: Context) -> str:
        """Remember this connection, for `fire` (from another connection) to sample on it."""
        armed["session"] = ctx.request_context.session
        return "armed"

    @server.tool(structured_output=False)
    async def fire(ctx: Context) -> str:
        """Sample on the connection `arm` remembered, outside any call of that connection."""
        return await _create_message(armed["session"], _sampling_params("late", 10), None)

    @server.tool(structured_output=False)
    def sample_cancels() -> str:
        """The tags of the summarize_slow calls whose handler saw a cancel."""
        return ",".join(cancelled)

    return server


def main() -> None:
    try:
        build().run("stdio")
    except (KeyboardInterrupt, asyncio.CancelledError):
        sys.exit(0)


if __name__ == "__main__":
    main()
