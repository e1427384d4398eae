"""MCP both ways, on Trio: load an MCP server, serve the union, call through both hops.

1. A toolkit loads an MCP server written with the official SDK (this same file, run
   with ``--server``) over stdio, next to a tool of its own.
2. It serves the union as an MCP server over streamable HTTP on loopback.
3. The SDK's own MCP client calls through both hops, then cancels a slow call half a
   second in: the cancel crosses both hops, and the innermost server's handler sees it
   (it records the cancel, and we ask it).

Needs the extra: ``pip install -e '.[mcp]'``. The test suite runs this script.
"""

from __future__ import annotations

import sys
from typing import Any

import trio

from toolnexus_trio import ToolContext, ToolkitOptions, define_tool, open_toolkit


def run_inner_server() -> None:
    """The innermost MCP server: the SDK's MCPServer, over stdio (asyncio, as most are)."""
    import anyio
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("inner")
    cancelled: list[str] = []

    @server.tool(structured_output=False)
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    @server.tool(structured_output=False)
    async def slow(tag: str) -> str:
        """Work for a minute, unless cancelled."""
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            cancelled.append(tag)
            raise
        return "finished"

    @server.tool(structured_output=False)
    def cancels() -> str:
        """The tags of the slow calls whose handler saw a cancel."""
        return ", ".join(cancelled) or "(none)"

    server.run("stdio")


async def shout(args: dict[str, Any], ctx: ToolContext) -> str:
    return str(args["text"]).upper() + "!"


async def main() -> None:
    from mcp import Client

    inner = {"command": [sys.executable, __file__, "--server"]}
    local = define_tool(
        "shout",
        "Shout the text.",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        shout,
    )
    options = ToolkitOptions(
        mcp={"mcpServers": {"inner": inner}}, extra_tools=[local], builtins=False
    )
    async with open_toolkit(options) as toolkit:
        print("loaded:", toolkit.mcp_status()["inner"])
        async with toolkit.serve() as served, Client(served.url) as client:
            print(f"serving the union at {served.url} (protocol {client.protocol_version})")
            names = [t.name for t in (await client.list_tools()).tools]
            print("tools:", ", ".join(names))

            added = await client.call_tool("inner_add", {"a": 20, "b": 22})
            print("inner_add(20, 22) through both hops ->", added.content[0].text)  # type: ignore[union-attr]
            shouted = await client.call_tool("shout", {"text": "hello"})
            print("shout('hello') ->", shouted.content[0].text)  # type: ignore[union-attr]

            with trio.move_on_after(0.5) as scope:
                await client.call_tool("inner_slow", {"tag": "call-1"})
            print("inner_slow cancelled by the client after 0.5 s:", scope.cancelled_caught)

            seen = await client.call_tool("inner_cancels", {})
            text = seen.content[0].text  # type: ignore[union-attr]
            print("the innermost server's handler saw the cancel of:", text)


if __name__ == "__main__":
    if "--server" in sys.argv:
        run_inner_server()
    else:
        trio.run(main)
