"""MCP value types shared by the source and the server (pure data, no SDK import)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs

from .._tools import ToolHints


@attrs.frozen
class McpStatus:
    """One configured server's state: ``connected``, ``disabled`` or ``failed``.

    ``error`` says why a server failed; ``tools`` counts the tools it exposes now.
    """

    state: Literal["connected", "disabled", "failed"]
    error: str | None = None
    tools: int = 0


@attrs.frozen
class McpToolInfo:
    """A server's tool as the server lists it (original name, unfiltered); ``hints``
    are its MCP ``annotations`` (``None`` when it has none)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    hints: ToolHints | None = None


@attrs.frozen
class McpInventory:
    """What :func:`~toolnexus_trio.mcp.list_mcp_tools` found on one server."""

    status: McpStatus
    tools: tuple[McpToolInfo, ...] = ()


@attrs.frozen
class MCPServeConfig:
    """The MCP profile of a served toolkit (SPEC §7C).

    ``name`` and ``version`` are the ``serverInfo``; ``tools`` lists the toolkit names
    to expose (``None`` = all; unknown names are ignored).

    A call of a 2026-07-28 client that may relay an inner server's elicitation or
    sampling is parked between its input rounds: at most ``max_parked`` at once (more
    get a tool error), a question unanswered for ``answer_seconds`` cancels the call
    (the client abandoned it), and a result no retry collects is dropped after
    ``keep_seconds``.
    """

    name: str = "toolnexus"
    version: str = "0.1.0"
    tools: Sequence[str] | None = None
    max_parked: int = 1024
    answer_seconds: float = 600.0
    keep_seconds: float = 60.0


@attrs.frozen
class CallInfo:
    """One inbound ``tools/call`` a served toolkit answered (given to ``on_call``)."""

    name: str
    source: str
    ms: float
    is_error: bool


OnCall = Callable[[CallInfo], None]
"""Called once per served ``tools/call``, after it is answered."""
