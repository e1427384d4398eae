"""The size bounds MCP traffic is held to, both ways, and how an error names them.

One number bounds a single JSON-RPC message whatever carries it: a stdio line (from a
server we run, or into ``serve --stdio`` and ``gateway --mcp``), a JSON answer over
streamable HTTP, one SSE event. A server's whole tool listing, all ``tools/list``
pages together, has its own bounds, so pagination cannot add up to more.
"""

from __future__ import annotations

from typing import Final

MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
"""The largest JSON-RPC message (16 MiB); on stdio, the longest line."""
MAX_TOOLS: Final = 1000
"""Tools one server may list (all pages); more fail the server."""
MAX_LISTING_BYTES: Final = 16 * 1024 * 1024
"""Bytes of JSON one server's tool listing may take (all pages); more fail the server."""


def size_text(limit: int) -> str:
    """*limit* for an error message: ``16 MiB (16777216 bytes)``, or ``1000 bytes``."""
    mib = 1024 * 1024
    if limit >= mib and limit % mib == 0:
        return f"{limit // mib} MiB ({limit} bytes)"
    return f"{limit} bytes"
