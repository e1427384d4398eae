"""``serve``'s client as the one that answers: relayed elicitation and sampling.

While ``serve`` runs a tool for an MCP client, the tool's run services carry a
:class:`Relay` for that client's request. An inner MCP server's elicitation (reached
through our MCP source) and a Tesseron host's ``confirm``/``elicit`` (through the
gateway) then go to that client as ``elicitation/create``, and an inner server's
sampling request as ``sampling/createMessage``, each tied to the client's
``tools/call`` (``related_request_id``, so streamable HTTP sends it on that call's
stream). On a 2026-07-28 connection, which has no server-to-client requests, the call
is parked (:mod:`._park`) and each request goes out as an ``InputRequiredResult``
round instead. Only when the client advertised the capability: otherwise the toolkit's
own ``wait_for`` / sampler answer, as without ``serve``.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._sampling import (
    DEPTH_META,
    SamplingMessage,
    SamplingRequest,
    SamplingResult,
    sampling_depth,
)
from .._wire import Answer, Request
from ._elicit import answer_from_elicit_result, elicitation_from_request
from ._park import Park

logger = logging.getLogger("toolnexus_trio.mcp.serve")

_ELICITATION = types.ClientCapabilities(elicitation=types.ElicitationCapability())
_SAMPLING = types.ClientCapabilities(sampling=types.SamplingCapability())


class Relay:
    """The MCP client of one served ``tools/call``, as elicitor and sampler."""

    def __init__(self, ctx: ServerRequestContext[Any], park: Park | None = None) -> None:
        self.ctx = ctx
        self.park = park
        # A 2026-07-28 call relays only when parked (its questions go out as rounds).
        able = park is not None or ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        self.elicits = able and can_elicit(ctx)
        self.samples = able and can_sample(ctx)

    async def elicit(self, request: Request) -> Answer:
        """Ask the client (form, or URL mode when it takes it); its answer as an Answer."""
        session = self.ctx.session
        caps = session.client_capabilities
        url_ok = bool(caps and caps.elicitation and caps.elicitation.url is not None)
        params = elicitation_from_request(request, url_supported=url_ok)
        if self.park is not None:
            return await self._elicit_parked(self.park, request, params)
        try:
            if params["mode"] == "url":
                # An inner server's own elicitation id travels on (its completion
                # notification names it); else the request's id.
                eid = (request.data or {}).get("elicitationId")
                reply = await session.elicit_url(
                    params["message"],
                    params["url"],
                    eid if isinstance(eid, str) else params["elicitationId"],
                    self.ctx.request_id,
                )
            else:
                reply = await session.elicit_form(
                    params["message"], params["requestedSchema"], self.ctx.request_id
                )
            return answer_from_elicit_result(
                request, reply.model_dump(by_alias=True, mode="json", exclude_none=True)
            )
        except (MCPError, ValueError) as exc:
            logger.warning("relayed elicitation failed: %s", exc)
            return Answer(request.id, False, reason="cancelled")

    @staticmethod
    async def _elicit_parked(park: Park, request: Request, params: dict[str, Any]) -> Answer:
        """The elicitation as an input round of the parked call."""
        if params["mode"] == "url":
            # No elicitationId: 2026-07-28 removed it (the round's key names the question).
            inner: types.ElicitRequestParams = types.ElicitRequestURLParams(
                message=params["message"], url=params["url"]
            )
        else:
            inner = types.ElicitRequestFormParams(
                message=params["message"], requested_schema=params["requestedSchema"]
            )
        reply = await park.ask(types.ElicitRequest(params=inner))
        if not isinstance(reply, types.ElicitResult):
            return Answer(request.id, False, reason="cancelled")  # the retry gave no answer
        try:
            return answer_from_elicit_result(
                request, reply.model_dump(by_alias=True, mode="json", exclude_none=True)
            )
        except ValueError as exc:
            logger.warning("relayed elicitation failed: %s", exc)
            return Answer(request.id, False, reason="cancelled")

    async def sample(self, request: SamplingRequest) -> SamplingResult:
        """Have the client sample *request* (its wire params, ``maxTokens`` capped and
        the depth in ``_meta``); its text answer."""
        params = types.CreateMessageRequestParams.model_validate(dict(request.params))
        if self.park is not None:
            reply = await self.park.ask(types.CreateMessageRequest(params=params))
            if not isinstance(reply, types.CreateMessageResult):
                raise ValueError("the MCP client gave no sampling answer")
            return _text_result(reply)
        # Sent as a plain request: the SDK's create_message helper warns that sampling is
        # deprecated in 2026-07-28, and this is a handshake-era connection.
        result = await self.ctx.session.send_request(
            types.CreateMessageRequest(params=params),
            types.CreateMessageResult,
            metadata=ServerMessageMetadata(related_request_id=self.ctx.request_id),
        )
        return _text_result(result)

    async def sample_text(self, prompt: str, max_tokens: int | None) -> str:
        """One user message, for a Tesseron host's ``sampling/request`` behind ``serve``."""
        depth = sampling_depth.get()
        tokens = max_tokens or 1024
        request = SamplingRequest(
            messages=(SamplingMessage("user", prompt),),
            max_tokens=tokens,
            depth=depth,
            params={
                "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                "maxTokens": tokens,
                "_meta": {DEPTH_META: depth},
            },
        )
        return (await self.sample(request)).text


def _text_result(result: types.CreateMessageResult) -> SamplingResult:
    content = result.content
    if not isinstance(content, types.TextContent):
        raise ValueError(f"the client answered {content.type} content, not text")
    return SamplingResult(content.text, model=result.model, stop_reason=result.stop_reason)


def can_elicit(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the client of *ctx* advertised elicitation."""
    return ctx.session.check_client_capability(_ELICITATION)


def can_sample(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the client of *ctx* advertised sampling."""
    return ctx.session.check_client_capability(_SAMPLING)
