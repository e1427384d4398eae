"""A stdio MCP server whose one tool answers with a JSON-RPC error (code -32001)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

server = MCPServer("refusing")


@server.tool()
def refuse() -> str:
    """Always refused, as a JSON-RPC error (not an ``isError`` result)."""
    raise MCPError(code=-32001, message="refused here")


if __name__ == "__main__":
    server.run("stdio")
