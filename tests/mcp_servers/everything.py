"""A real MCP server for the tests, written with the SDK's MCPServer (mcp 2.x).

Run over stdio (``python everything.py [--name N] [--child]``) or imported and served
over streamable HTTP in-process (:func:`build`). ``--child`` starts a grandchild
``sleep`` so the tests can check the whole process tree is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from pydantic import BaseModel


class Name(BaseModel):
    name: str


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


def build(name: str = "everything") -> MCPServer:
    server = MCPServer(name)
    cancelled: list[str] = []
    started: list[str] = []
    child: dict[str, Any] = {}

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool(structured_output=False)
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    @server.tool()
    def fail(message: str = "boom") -> str:
        """Always fails."""
        raise ToolError(message)

    @server.tool()
    async def slow(tag: str, seconds: float = 30.0) -> str:
        """Sleep; a cancel is recorded under its tag."""
        started.append(tag)
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            cancelled.append(tag)
            raise
        return f"slept {tag}"

    @server.tool()
    def seen_cancels(started_calls: bool = False) -> str:
        """The tags of the slow calls whose handler saw a cancel (or, with
        *started_calls*, that started: a test's signal that a call is in flight)."""
        return ",".join(started if started_calls else cancelled)

    @server.tool()
    async def progress(steps: int, ctx: Context) -> str:
        """Report progress steps."""
        for i in range(1, steps + 1):
            await ctx.report_progress(i, steps, f"step {i}")
        return f"done {steps}"

    @server.tool()
    async def ask(question: str, ctx: Context) -> str:
        """Elicit a name (form mode)."""
        result = await ctx.elicit(question, schema=Name)
        if result.action == "accept":
            return f"accept:{result.data.name}"
        return result.action

    @server.tool(structured_output=False)
    async def summarize(text: str, ctx: Context, max_tokens: int = 100) -> str:
        """Ask the client's model (sampling) to summarise *text*."""
        return await _create_message(
            ctx.request_context.session, _sampling_params(text, max_tokens), ctx.request_id
        )

    @server.tool(structured_output=False)
    async def summarize_slow(tag: str, ctx: Context) -> str:
        """Sample; a cancel of this call while the client samples is recorded under *tag*."""
        started.append(tag)
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
        child["armed"] = ctx.request_context.session
        return "armed"

    @server.tool(structured_output=False)
    async def fire(ctx: Context) -> str:
        """Sample on the connection `arm` remembered, outside any call of that connection."""
        return await _create_message(child["armed"], _sampling_params("late", 10), None)

    @server.tool()
    async def login(ctx: Context) -> str:
        """Elicit in URL mode."""
        result = await ctx.elicit_url("Log in to continue", "https://auth.example/login", "el-1")
        return result.action

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool named 'extra' and announce the change."""
        server.add_tool(lambda: "extra!", name="extra", description="Added later.")
        await ctx.request_context.session.send_tool_list_changed()
        return "grown"

    @server.tool(structured_output=False)
    def header(name: str, ctx: Context) -> str:
        """An HTTP request header of this call ('' over stdio)."""
        request = ctx.request_context.request
        return "" if request is None else str(request.headers.get(name, ""))

    @server.tool()
    def pids() -> str:
        """This process's pid and its child's (when started with --child)."""
        proc = child.get("proc")
        return f"{os.getpid()} {proc.pid if proc else ''}".strip()

    server._test_child = child  # type: ignore[attr-defined]
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="everything")
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    server = build(args.name)
    if args.child:
        # A grandchild in our process group, as npx -> node would leave.
        server._test_child["proc"] = subprocess.Popen(  # type: ignore[attr-defined]
            ["sleep", "300"], stdin=subprocess.DEVNULL
        )
    try:
        server.run("stdio")
    except (KeyboardInterrupt, asyncio.CancelledError):
        sys.exit(0)


if __name__ == "__main__":
    main()
