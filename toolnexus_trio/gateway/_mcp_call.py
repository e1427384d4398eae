"""One MCP request of ``gateway --mcp``: the call it makes, the revision it speaks, its results.

:class:`_Call` is what a tool call of :class:`~toolnexus_trio.gateway._mcp_front.GatewayFront`
leaves in the :data:`current_call` ContextVar for the gateway's per-invocation tasks
(which inherit it), so that a host's requests, progress and logs reach the client and
the request of the call that made the invocation. :func:`_modern` tells a 2026-07-28
request from a handshake-era one; :func:`_ok` and :func:`_error` make the tool results.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..tesseron._errors import ActionError
from ._mcp_park import Park

__all__ = ["current_call"]

_SAMPLING = types.ClientCapabilities(sampling=types.SamplingCapability())
_ELICITATION = types.ClientCapabilities(elicitation=types.ElicitationCapability())


class _Call:
    """The MCP request an invocation was made for (the ContextVar's value).

    On a 2026-07-28 connection the call is parked (:mod:`._mcp_park`): ``ctx`` is
    the request of the current round, and what the client can do is fixed at the first.
    """

    __slots__ = (
        "app_id",
        "client_name",
        "ctx",
        "cursor",
        "elicitation",
        "park",
        "sampling",
        "token",
    )

    def __init__(
        self, ctx: ServerRequestContext[Any], app_id: str, park: Park | None = None
    ) -> None:
        self.ctx = ctx
        self.app_id = app_id
        self.park = park
        session = ctx.session
        self.sampling: bool = session.check_client_capability(_SAMPLING)
        self.elicitation: bool = session.check_client_capability(_ELICITATION)
        self.client_name = _client_name(ctx)
        self.token: str | int | None = None
        self.cursor = -1  # MCP progress must increase; below 0 so the first update (0 too) goes
        self.round(ctx)

    def round(self, ctx: ServerRequestContext[Any]) -> None:
        """The request now carrying this call (a parked call's retry)."""
        self.ctx = ctx
        meta = ctx.meta
        self.token = meta.get("progress_token") if meta else None

    @property
    def live(self) -> bool:
        """Whether a request is there for progress and logs to ride on."""
        return self.park is None or self.park.round_open


def _client_name(ctx: ServerRequestContext[Any]) -> str:
    params = ctx.session.client_params
    return params.client_info.name if params is not None else "mcp-client"


def _modern(ctx: ServerRequestContext[Any]) -> bool:
    """A 2026-07-28 request: no server-to-client requests, no ``initialized``."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


current_call: ContextVar[_Call | None] = ContextVar("toolnexus_trio_mcp_gateway_call", default=None)
"""The MCP request whose tool call is running (host requests of it go to its client)."""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


def _ok(value: Any) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=_text(value))])


def _error(exc: ActionError) -> types.CallToolResult:
    structured: dict[str, Any] = {"code": int(exc.code)}
    if exc.data is not None:
        structured["data"] = exc.data
    return types.CallToolResult(
        content=[types.TextContent(text=exc.message)],
        structured_content=structured,
        is_error=True,
    )
