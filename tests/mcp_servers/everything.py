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
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel


class Name(BaseModel):
    name: str


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
