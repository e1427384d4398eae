"""``python -m toolnexus_trio gateway --mcp``: the Tesseron gateway as an MCP server on stdio.

An agent (any MCP client) starts this process; it discovers Tesseron hosts from their
instance manifests, dials them with our :class:`~toolnexus_trio.tesseron.Gateway`, and
serves, over MCP:

- the meta tools (always listed; some clients ignore ``tools/list_changed``):
  ``tesseron__claim_session``, ``tesseron__list_actions``,
  ``tesseron__invoke_action``, ``tesseron__read_resource`` and
  ``tesseron__list_pending_claims``;
- one ``<app_id>__<action>`` tool per action of each claimed, live session (names as
  :meth:`Gateway.tools` makes them provider-safe), with annotations mapped to MCP
  ``ToolAnnotations``;
- each app's resources as ``tesseron://<app_id>/<name>`` (list, read, subscribe).

Per call, the MCP request's context (session, request id, progress token) lives in a
ContextVar: the gateway's per-invocation tasks inherit it, so a host's
``sampling/request`` and ``elicitation/request`` go to the MCP client of the call that
made the invocation, and progress/log go back on that request. The client's
``notifications/cancelled`` cancels the handler's task: our invoke sends
``actions/cancel`` at once and the call ends (the SDK sends no reply to a cancelled
request, which the MCP spec allows).

Both MCP revisions are served. A handshake-era client says who it is and what it can
do in ``initialize``; a 2026-07-28 client sends no ``initialize`` and says it in every
request's ``_meta``, so the agent is learnt from every request. That revision forbids
server-to-client requests, so a host's sampling or elicitation request goes out as an
``InputRequiredResult`` round of the ``tools/call`` (:mod:`._gateway_park`), and list
changes and resource updates go out on ``subscriptions/listen`` streams.

Nothing but protocol goes to stdout; claim codes and logs go to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Final

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated, ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._groups import collapse_groups
from .._runctx import RunServices, current_run
from .._wire import Answer
from .._wire import Request as WaitRequest
from ..mcp._elicit import answer_from_elicit_result, elicitation_from_request
from ..mcp._stdin import capped_stdio_server
from ..tesseron._errors import ActionError, TesseronErrorCode
from ..tesseron._wire import Agent
from ._gateway import Gateway
from ._invoke import sampling_depth
from ._mcp_park import ANSWER_SECONDS, KEEP_SECONDS, MAX_PARKS, Park, args_digest
from ._session import GatewayOptions, GatewaySession

__all__ = ["GatewayFront", "run_gateway_front"]

logger = logging.getLogger("toolnexus_trio.mcp.gateway")

POLL_SECONDS: Final = 2.0
"""How often the instances directory is read for new hosts."""
NOTIFY_BOUND: Final = 1.0
"""Seconds a ``list_changed`` may take to go out; a stuck client is skipped."""
DEFAULT_MAX_TOKENS: Final = 1024
URI_SCHEME: Final = "tesseron://"
MAX_LISTENED: Final = 64
"""Resources one ``subscriptions/listen`` stream may name; the rest are not followed."""
META_PREFIX: Final = "tesseron__"

_SAMPLING = types.ClientCapabilities(sampling=types.SamplingCapability())
_ELICITATION = types.ClientCapabilities(elicitation=types.ElicitationCapability())
_LOG_LEVELS: Final = {"debug": "debug", "info": "info", "warn": "warning", "error": "error"}


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props)}


_STR: Final = {"type": "string"}
META_TOOLS: Final = [
    types.Tool(
        name="tesseron__claim_session",
        description=(
            "Claim a Tesseron app session with the claim code the user read from the app "
            "or the gateway's log (e.g. ABCD-EF). Its actions then become tools."
        ),
        input_schema=_obj({"code": _STR}),
    ),
    types.Tool(
        name="tesseron__list_actions",
        description="List the actions of every claimed, connected Tesseron app.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="tesseron__invoke_action",
        description="Invoke an action of a claimed Tesseron app (for clients that do not "
        "refresh their tool list).",
        input_schema={
            "type": "object",
            "properties": {"app_id": _STR, "action": _STR, "args": {"type": "object"}},
            "required": ["app_id", "action"],
        },
    ),
    types.Tool(
        name="tesseron__read_resource",
        description="Read a resource of a claimed Tesseron app.",
        input_schema=_obj({"app_id": _STR, "name": _STR}),
    ),
    types.Tool(
        name="tesseron__list_pending_claims",
        description="List the connected Tesseron apps waiting to be claimed (the user has "
        "the codes; they are never shown here).",
        input_schema={"type": "object", "properties": {}},
    ),
]


class _Call:
    """The MCP request an invocation was made for (the ContextVar's value).

    On a 2026-07-28 connection the call is parked (:mod:`._gateway_park`): ``ctx`` is
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
        self.cursor = 0  # MCP progress must increase
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


def _sampled_text(result: types.CreateMessageResult) -> str:
    content = result.content
    return content.text if isinstance(content, types.TextContent) else str(content)


def _annotations(raw: dict[str, Any] | None) -> types.ToolAnnotations | None:
    if not raw:
        return None
    keys = {
        "readOnly": "read_only_hint",
        "destructive": "destructive_hint",
        "idempotent": "idempotent_hint",
        "openWorld": "open_world_hint",
    }
    hints: dict[str, Any] = {field: raw[k] for k, field in keys.items() if type(raw.get(k)) is bool}
    if isinstance(raw.get("title"), str):
        hints["title"] = raw["title"]
    return types.ToolAnnotations(**hints) if hints else None


class GatewayFront:
    """The MCP server face of a :class:`Gateway` (one stdio client)."""

    def __init__(self, gateway: Gateway, instances_dir: Path | None = None) -> None:
        self.gateway = gateway
        self.instances_dir = instances_dir
        self._session: Any = None  # the client's ServerSession, once initialized
        self._sampling_depths: list[int] = []  # depths of createMessage calls in flight
        self._subscribed: dict[str, str] = {}  # uri -> gateway subscription id
        self._updates: list[str] = []  # uris to notify, filled by the reader's hook
        self._updated = trio.Event()
        self._agent_seen: tuple[str, bool, bool] | None = None  # what set_agent was told
        self._parks: dict[str, tuple[Park, _Call]] = {}  # request_state -> a 2026-07-28 call
        self._bus = InMemorySubscriptionBus()  # list_changed for subscriptions/listen
        self.nursery: trio.Nursery | None = None
        """Where parked (2026-07-28) calls run; set by :func:`run_gateway_front`."""
        gateway.on_resource_updated = self._on_resource_updated
        self.server: Server[Any] = Server(
            "tesseron-gateway",
            version="toolnexus-trio",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen,
        )
        self._listener = ListenHandler(self._bus)
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._initialized
        )

    def init_options(self) -> InitializationOptions:
        """``initialize``'s answer: tools and resources with ``listChanged``, subscribe, logging."""
        options = self.server.create_initialization_options(
            NotificationOptions(tools_changed=True, resources_changed=True)
        )
        caps = options.capabilities
        caps.resources = types.ResourcesCapability(subscribe=True, list_changed=True)
        caps.logging = types.LoggingCapability()
        return options

    # ------------------------------------------------------------------ agent identity

    async def _initialized(
        self, ctx: ServerRequestContext[Any], params: types.NotificationParams | None
    ) -> None:
        self._session = ctx.session
        self._learn_agent(ctx)
        await trio.lowlevel.checkpoint()

    def _learn_agent(self, ctx: ServerRequestContext[Any]) -> None:
        """Tell the gateway who the agent is and what it can do, when that changed.

        A handshake-era client says it once, in ``initialize`` (applied at
        ``notifications/initialized``); a 2026-07-28 client sends no ``initialized`` and
        says it in every request's ``_meta`` instead, so every request is looked at
        (a claim's too, before ``tesseron/claimed`` goes out)."""
        session = ctx.session
        if session.client_params is None and session.client_capabilities is None:
            return  # an envelope-less request (or before initialize): nothing to learn
        seen = (
            _client_name(ctx),
            session.check_client_capability(_SAMPLING),
            session.check_client_capability(_ELICITATION),
        )
        if seen != self._agent_seen:
            self._agent_seen = seen
            name, sampling, elicitation = seen
            self.gateway.set_agent(
                Agent(id=name, name=name), sampling=sampling, elicitation=elicitation
            )

    # ------------------------------------------------------------------ tools

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._learn_agent(ctx)
        tools = list(META_TOOLS)
        for tool in self.gateway.tools():
            target = self.gateway.tool_target(tool.name)
            annotations = _annotations(target[1].annotations) if target is not None else None
            tools.append(
                types.Tool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=tool.input_schema,
                    annotations=annotations,
                )
            )
        await trio.lowlevel.checkpoint()
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        self._learn_agent(ctx)
        if params.request_state is not None:
            return await self._resume(ctx, params)
        args = dict(params.arguments or {})
        name = params.name
        try:
            if name.startswith(META_PREFIX):
                return await self._meta(ctx, name, args, params)
            target = self.gateway.tool_target(name)
            if target is not None:
                session, manifest = target
                return await self._invoke(ctx, session.app.id, manifest.name, args, params)
            routed = self._route(name)
            if routed is None:
                raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")
            # <app>__<action> of a known app whose action is not (or not yet) listed:
            # the host answers (ActionNotFound -32003 as a tool error), as the
            # reference gateway does; an unclaimed app is refused with -32009.
            return await self._invoke(ctx, routed[0], routed[1], args, params)
        except ActionError as exc:
            return _error(exc)

    def _route(self, name: str) -> tuple[str, str] | None:
        """``(app_id, action)`` for a tool name ``<app_id>__<action>`` of a known app.

        The longest app id that prefixes the name wins (app ids may hold ``_``)."""
        best: str | None = None
        for session in self.gateway.sessions():
            app_id = session.app.id
            if (
                name.startswith(f"{app_id}__")
                and len(name) > len(app_id) + 2
                and (best is None or len(app_id) > len(best))
            ):
                best = app_id
        return None if best is None else (best, name[len(best) + 2 :])

    async def _invoke(
        self,
        ctx: ServerRequestContext[Any],
        app_id: str,
        action: str,
        args: Any,
        params: types.CallToolRequestParams,
    ) -> types.CallToolResult | types.InputRequiredResult:
        self._check_claimed(app_id)
        # A tools/call made while a sampling of ours is in flight is (most likely) made
        # by that sampling's model: it nests one level deeper (the reference's heuristic).
        depth = max(self._sampling_depths, default=0)
        if _modern(ctx):
            return await self._invoke_parked(ctx, app_id, action, args, params, depth)
        call = _Call(ctx, app_id)
        depth_token = sampling_depth.set(depth)
        call_token = current_call.set(call)
        run_token = current_run.set(RunServices(emit=self._emit, metric=None, sample=None))
        try:
            output = await self.gateway.invoke(app_id, action, args)
        finally:
            current_run.reset(run_token)
            current_call.reset(call_token)
            sampling_depth.reset(depth_token)
        return _ok(output)

    # ------------------------------------------------------------------ 2026-07-28 calls

    async def _invoke_parked(
        self,
        ctx: ServerRequestContext[Any],
        app_id: str,
        action: str,
        args: Any,
        params: types.CallToolRequestParams,
        depth: int,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """A 2026-07-28 call: the invocation runs in a task of its own (a :class:`Park`),
        so that a host's question can go out as ``InputRequiredResult``."""
        if self.nursery is None or len(self._parks) >= MAX_PARKS:
            raise ActionError(
                TesseronErrorCode.INTERNAL_ERROR,
                f"Too many calls in flight (at most {MAX_PARKS} at once)",
            )
        park = Park(params.name, args_digest(params.arguments))
        call = _Call(ctx, app_id, park)
        self._parks[park.id] = (park, call)
        self.nursery.start_soon(self._run_parked, park, call, action, args, depth)
        return await self._round(ctx, park, call)

    async def _run_parked(
        self, park: Park, call: _Call, action: str, args: Any, depth: int
    ) -> None:
        # This task's own context: the gateway's per-invocation tasks inherit it.
        sampling_depth.set(depth)
        current_call.set(call)
        current_run.set(RunServices(emit=self._emit, metric=None, sample=None))
        try:
            with park.scope:
                try:
                    output = await self.gateway.invoke(call.app_id, action, args)
                except ActionError as exc:
                    park.finish(_error(exc))
                except Exception as exc:  # the call ends as a tool error, the front goes on
                    logger.exception("invoking %s__%s failed", call.app_id, action)
                    park.finish(_error(ActionError(TesseronErrorCode.INTERNAL_ERROR, f"{exc}")))
                else:
                    park.finish(_ok(output))
            if park.outcome is not None:
                with trio.move_on_after(KEEP_SECONDS):  # for a retry to collect it
                    await park.collected.wait()
        finally:
            self._parks.pop(park.id, None)

    async def _resume(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """A retry with answers: hand them to the waiting host requests, then go on."""
        parked = self._parks.get(params.request_state or "")
        park, call = parked if parked is not None else (None, None)
        if (
            park is None
            or call is None
            or park.round_open
            or park.tool != params.name
            or park.digest != args_digest(params.arguments)
        ):
            raise MCPError(
                code=types.INVALID_PARAMS,
                message="request_state is not one of ours for this call, or its call ended",
            )
        park.answer(params.input_responses or {})
        return await self._round(ctx, park, call)

    async def _round(
        self, ctx: ServerRequestContext[Any], park: Park, call: _Call
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Wait for the parked call's result, or for questions to send the client."""
        call.round(ctx)
        park.round_open = True
        done = False
        try:
            step = await park.next_step()
            done = True
        finally:
            park.round_open = False
            if not done:  # the client cancelled this request, or the front closes
                park.scope.cancel(reason="the MCP request was cancelled")
        if isinstance(step, types.CallToolResult):
            self._parks.pop(park.id, None)  # spent: a replay of its request_state is refused
            return step
        return types.InputRequiredResult(input_requests=step, request_state=park.id)

    def _check_claimed(self, app_id: str) -> None:
        sessions = [s for s in self.gateway.sessions() if s.app.id == app_id]
        if any(s.claimed and s.connected for s in sessions):
            return
        if any(s.connected for s in sessions):
            raise ActionError(
                TesseronErrorCode.UNAUTHORIZED,
                f"App {app_id!r} is not claimed: claim it with tesseron__claim_session",
            )
        raise ActionError(
            TesseronErrorCode.TRANSPORT_CLOSED if sessions else TesseronErrorCode.ACTION_NOT_FOUND,
            f"No connected Tesseron app {app_id!r}",
        )

    async def _meta(
        self,
        ctx: ServerRequestContext[Any],
        name: str,
        args: dict[str, Any],
        params: types.CallToolRequestParams,
    ) -> types.CallToolResult | types.InputRequiredResult:
        gw = self.gateway
        if name == "tesseron__claim_session":
            code = args.get("code")
            if not isinstance(code, str):
                raise ActionError(TesseronErrorCode.INVALID_PARAMS, "code must be a string")
            session = await gw.try_claim(code)  # wrong codes are slowed down
            tools = [t.name for t in gw.tools() if gw.tool_target(t.name) is not None]
            mine = [t for t in tools if (gw.tool_target(t) or (session,))[0] is session]
            return _ok(
                {
                    "claimed": session.app.id,
                    "app": session.app.name,
                    "sessionId": session.session_id,
                    "tools": mine,
                }
            )
        if name == "tesseron__list_actions":
            await trio.lowlevel.checkpoint()
            return _ok(self._list_actions())
        if name == "tesseron__list_pending_claims":
            await trio.lowlevel.checkpoint()
            pending = [
                {"app_id": s.app.id, "app": s.app.name, "sessionId": s.session_id}
                for s in gw.sessions()
                if not s.claimed and s.connected
            ]
            return _ok(pending)
        app_id = args.get("app_id")
        if not isinstance(app_id, str):
            raise ActionError(TesseronErrorCode.INVALID_PARAMS, "app_id must be a string")
        if name == "tesseron__invoke_action":
            action = args.get("action")
            if not isinstance(action, str):
                raise ActionError(TesseronErrorCode.INVALID_PARAMS, "action must be a string")
            inner = args.get("args", {})
            return await self._invoke(ctx, app_id, action, {} if inner is None else inner, params)
        if name == "tesseron__read_resource":
            resource = args.get("name")
            if not isinstance(resource, str):
                raise ActionError(TesseronErrorCode.INVALID_PARAMS, "name must be a string")
            self._check_claimed(app_id)
            return _ok(await gw.read_resource(app_id, resource))
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")

    def _list_actions(self) -> list[dict[str, Any]]:
        gw = self.gateway
        by_session: dict[str, dict[str, Any]] = {}
        for tool in gw.tools():
            target = gw.tool_target(tool.name)
            if target is None:
                continue
            session, manifest = target
            entry = by_session.setdefault(
                session.session_id,
                {"app_id": session.app.id, "app": session.app.name, "actions": []},
            )
            entry["actions"].append(
                {
                    "name": manifest.name,
                    "tool": tool.name,
                    "description": manifest.description,
                    "inputSchema": tool.input_schema,
                }
            )
        return list(by_session.values())

    # ------------------------------------------------------------------ host -> client

    async def _emit(self, event: dict[str, Any]) -> None:
        call = current_call.get()
        if call is None or not call.live:
            return  # a parked call between rounds: no request to ride on
        try:
            if event.get("type") == "progress":
                await self._progress(call, event)
            elif event.get("type") == "log":
                await self._log(call, event)
        except Exception as exc:  # the client's stream may be gone: the call goes on
            logger.debug("dropped a notification: %s", exc)

    @staticmethod
    async def _progress(call: _Call, event: dict[str, Any]) -> None:
        percent = event.get("percent")
        if call.token is None or not isinstance(percent, int) or percent <= call.cursor:
            return  # only with a token, and MCP progress must increase
        call.cursor = percent
        message = event.get("message")
        await call.ctx.session.send_progress_notification(
            call.token,
            float(percent),
            100.0,
            message if isinstance(message, str) else None,
            related_request_id=str(call.ctx.request_id),
        )

    @staticmethod
    async def _log(call: _Call, event: dict[str, Any]) -> None:
        level = _LOG_LEVELS.get(str(event.get("level")), "info")
        data: dict[str, Any] = {"message": event.get("message")}
        meta = event.get("meta")
        if isinstance(meta, dict):
            data.update(meta)
        if call.park is not None:
            # 2026-07-28: sent only when the request opted in (its log level), by the SDK.
            await call.ctx.session.send_log_message(
                level,  # type: ignore[arg-type]  # one of _LOG_LEVELS' values
                data,
                logger=call.app_id,
                related_request_id=call.ctx.request_id,
            )
            return
        notification = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(
                level=level,  # type: ignore[arg-type]  # one of _LOG_LEVELS' values
                data=data,
                logger=call.app_id,
            )
        )
        await call.ctx.session.send_notification(notification, call.ctx.request_id)

    async def sample(self, prompt: str, max_tokens: int | None, schema: Any) -> str:
        """The gateway's sampler: a host's ``sampling/request`` as ``sampling/createMessage``."""
        call = current_call.get()
        if call is None:
            raise ActionError(TesseronErrorCode.SAMPLING_NOT_AVAILABLE, "No agent to sample")
        ctx = call.ctx
        if not call.sampling:
            name = call.client_name
            raise ActionError(
                TesseronErrorCode.SAMPLING_NOT_AVAILABLE,
                f"The agent ({name}) does not support sampling",
                {"clientName": name},
            )
        depth = sampling_depth.get()  # set by the gateway for this request's task
        self._sampling_depths.append(depth)
        if call.park is not None:
            try:
                return await self._sample_parked(call, call.park, prompt, max_tokens)
            finally:
                self._sampling_depths.remove(depth)
        try:
            result = await ctx.session.create_message(
                [
                    types.SamplingMessage(
                        role="user", content=types.TextContent(type="text", text=prompt)
                    )
                ],
                max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
                related_request_id=ctx.request_id,
            )
        except MCPError as exc:
            if exc.code == types.METHOD_NOT_FOUND:
                # The client said it samples but does not: "not available", as the
                # reference gateway answers, so the host can tell it from a failure.
                name = call.client_name
                raise ActionError(
                    TesseronErrorCode.SAMPLING_NOT_AVAILABLE,
                    f"The agent ({name}) rejected sampling: {exc.message}",
                    {"clientName": name},
                ) from None
            raise ActionError(TesseronErrorCode.HANDLER_ERROR, f"Sampling failed: {exc}") from None
        finally:
            self._sampling_depths.remove(depth)
        return _sampled_text(result)

    @staticmethod
    async def _ask_parked(
        park: Park, request: types.CreateMessageRequest | types.ElicitRequest
    ) -> types.InputResponse | None:
        """Hand *request* to the parked call's next round; wait for the retry's answer."""
        question = park.ask(request)
        try:
            with trio.move_on_after(ANSWER_SECONDS):
                await question.answered.wait()
        finally:
            park.withdraw(question)
        return question.reply

    async def _sample_parked(
        self, call: _Call, park: Park, prompt: str, max_tokens: int | None
    ) -> str:
        reply = await self._ask_parked(
            park,
            types.CreateMessageRequest(
                params=types.CreateMessageRequestParams(
                    messages=[
                        types.SamplingMessage(
                            role="user", content=types.TextContent(type="text", text=prompt)
                        )
                    ],
                    max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
                )
            ),
        )
        if not isinstance(reply, types.CreateMessageResult):
            raise ActionError(
                TesseronErrorCode.HANDLER_ERROR,
                f"Sampling failed: the agent ({call.client_name}) gave no answer",
            )
        return _sampled_text(reply)

    async def wait_for(self, request: WaitRequest) -> Answer:
        """The gateway's ``wait_for``: a host's ``elicitation/request`` as a form elicitation."""
        call = current_call.get()
        if call is None or not call.elicitation:
            raise ActionError(
                TesseronErrorCode.ELICITATION_NOT_AVAILABLE,
                "The agent does not support elicitation",
            )
        ctx = call.ctx
        params = elicitation_from_request(request, url_supported=False)
        if call.park is not None:
            reply = await self._ask_parked(
                call.park,
                types.ElicitRequest(
                    params=types.ElicitRequestFormParams(
                        message=params["message"], requested_schema=params["requestedSchema"]
                    )
                ),
            )
            if not isinstance(reply, types.ElicitResult):
                return Answer(request.id, False, reason="cancelled")  # no answer given
            return answer_from_elicit_result(
                request, reply.model_dump(by_alias=True, mode="json", exclude_none=True)
            )
        reply = await ctx.session.elicit_form(
            params["message"], params["requestedSchema"], ctx.request_id
        )
        return answer_from_elicit_result(
            request, reply.model_dump(by_alias=True, mode="json", exclude_none=True)
        )

    # ------------------------------------------------------------------ resources

    def _resource_target(self, uri: str) -> tuple[str, str]:
        if uri.startswith(URI_SCHEME):
            app_id, sep, name = uri[len(URI_SCHEME) :].partition("/")
            if sep and app_id and name:
                self._check_claimed(app_id)
                return app_id, name
        raise MCPError(code=types.INVALID_PARAMS, message=f"Not a Tesseron resource: {uri}")

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        seen: set[str] = set()
        out: list[types.Resource] = []
        live = [s for s in self.gateway.sessions() if s.claimed and s.connected]
        for session in sorted(live, key=lambda s: s.claimed_at or 0, reverse=True):
            for resource in session.resources:
                uri = f"{URI_SCHEME}{session.app.id}/{resource.name}"
                if uri not in seen:
                    seen.add(uri)
                    out.append(
                        types.Resource(
                            uri=uri,
                            name=resource.name,
                            description=resource.description or None,
                            mime_type="application/json",
                        )
                    )
        await trio.lowlevel.checkpoint()
        return types.ListResourcesResult(resources=out)

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            app_id, name = self._resource_target(uri)
            value = await self.gateway.read_resource(app_id, name)
        except ActionError as exc:
            raise MCPError(code=int(exc.code), message=exc.message, data=exc.data) from None
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(uri=uri, mime_type="application/json", text=_text(value))
            ]
        )

    async def _subscribe(
        self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        uri = str(params.uri)
        if uri not in self._subscribed:
            try:
                app_id, name = self._resource_target(uri)
                sub_id = await self.gateway.subscribe_resource(app_id, name)
            except ActionError as exc:
                raise MCPError(code=int(exc.code), message=exc.message, data=exc.data) from None
            self._subscribed[uri] = sub_id
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        sub_id = self._subscribed.pop(str(params.uri), None)
        if sub_id is not None:
            self.gateway.unsubscribe_resource(sub_id)
        await trio.lowlevel.checkpoint()
        return types.EmptyResult()

    async def _listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """``subscriptions/listen`` (2026-07-28): list changes, and the updates of the
        ``tesseron://`` resources it names (subscribed at their hosts while it lasts)."""
        self._learn_agent(ctx)
        subs: list[str] = []
        try:
            for uri in list(params.notifications.resource_subscriptions or ())[:MAX_LISTENED]:
                try:
                    app_id, name = self._resource_target(uri)
                    subs.append(await self.gateway.subscribe_resource(app_id, name))
                except (ActionError, MCPError, LookupError) as exc:
                    logger.info("not listening to %s: %s", uri, exc)  # never updated, then
            return await self._listener(ctx, params)
        finally:
            for sub_id in subs:
                self.gateway.unsubscribe_resource(sub_id)

    def _on_resource_updated(self, session: GatewaySession, name: str, value: Any) -> None:
        # Called from a connection's reader: queue, never await.
        uri = f"{URI_SCHEME}{session.app.id}/{name}"
        if uri not in self._updates:
            self._updates.append(uri)
        self._updated.set()

    # ------------------------------------------------------------------ background tasks

    async def discover_forever(self, announce: Callable[[str], None]) -> None:
        """Dial new hosts of the instances directory every :data:`POLL_SECONDS`."""
        while True:
            for session in await self.gateway.discover(self.instances_dir):
                if session.claim_code is not None:
                    announce(
                        f"Tesseron app {session.app.name!r} ({session.app.id}) is waiting: "
                        f"claim code {session.claim_code}"
                    )
                else:
                    announce(f"Tesseron app {session.app.id} resumed its session")
            await trio.sleep(POLL_SECONDS)

    async def notify_changes(self) -> None:
        """Send ``tools/list_changed`` and ``resources/list_changed`` on every gateway change."""
        version = self.gateway.version
        while True:
            version = await self.gateway.wait_changed(version)
            # 2026-07-28 clients hear it on their subscriptions/listen streams.
            await self._bus.publish(ToolsListChanged())
            await self._bus.publish(ResourcesListChanged())
            session = self._session
            if session is None:
                continue
            # Subscriptions of a dropped host are gone with its connection.
            live = set(self.gateway._subscriptions)
            for uri, sub_id in list(self._subscribed.items()):
                if sub_id not in live:
                    del self._subscribed[uri]
            with trio.move_on_after(NOTIFY_BOUND):
                await session.send_tool_list_changed()
                await session.send_resource_list_changed()

    async def forward_updates(self) -> None:
        """Send ``notifications/resources/updated`` for what the hosts published."""
        while True:
            await self._updated.wait()
            self._updated = trio.Event()
            updates, self._updates = self._updates, []
            session = self._session
            for uri in updates:
                await self._bus.publish(ResourceUpdated(uri))
                if session is not None and uri in self._subscribed:
                    with trio.move_on_after(NOTIFY_BOUND):
                        await session.send_resource_updated(uri)


async def run_gateway_front(
    instances_dir: Path | None,
    *,
    resume_ttl_ms: int,
    max_sampling_depth: int,
) -> int:
    """Serve the gateway over this process's stdin/stdout until the client closes stdin."""
    # The 2026-07-28 revision deprecates sampling and logging; a handshake-era client
    # still uses them, so the SDK's warning (on stderr) says nothing useful here.
    warnings.filterwarnings("ignore", module=r"toolnexus_trio\.mcp\._gateway_front")
    warnings.filterwarnings("ignore", message=".*deprecated as of 2026-07-28.*")

    def announce(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    holder: list[GatewayFront] = []

    async def sample(prompt: str, max_tokens: int | None, schema: Any) -> str:
        return await holder[0].sample(prompt, max_tokens, schema)

    async def wait_for(request: WaitRequest) -> Answer:
        return await holder[0].wait_for(request)

    options = GatewayOptions(
        sampler=sample,
        wait_for=wait_for,
        resume_ttl_ms=resume_ttl_ms,
        max_sampling_depth=max_sampling_depth,
    )
    with collapse_groups():
        async with Gateway(options) as gateway:
            # Until the client says who it is (initialize, or a 2026-07-28 request's
            # envelope), hosts hear "no sampling or elicitation" (corrected by
            # tesseron/claimed, as the reference does).
            gateway.set_agent(
                Agent(id="pending", name="Awaiting agent"), sampling=False, elicitation=False
            )
            front = GatewayFront(gateway, instances_dir)
            holder.append(front)
            async with capped_stdio_server() as (read, write), trio.open_nursery() as nursery:
                front.nursery = nursery  # 2026-07-28 calls run here between their rounds
                nursery.start_soon(front.discover_forever, announce)
                nursery.start_soon(front.notify_changes)
                nursery.start_soon(front.forward_updates)
                await front.server.run(read, write, front.init_options())
                nursery.cancel_scope.cancel()
    return 0
