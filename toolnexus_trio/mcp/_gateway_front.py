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
from mcp.shared.exceptions import MCPError

from .._groups import collapse_groups
from .._runctx import RunServices, current_run
from .._wire import Answer
from .._wire import Request as WaitRequest
from ..tesseron import ActionError, Agent, Gateway, GatewayOptions, GatewaySession
from ..tesseron._errors import TesseronErrorCode
from ..tesseron._gateway_invoke import sampling_depth
from ._elicit import answer_from_elicit_result, elicitation_from_request
from ._stdin import capped_stdio_server

__all__ = ["GatewayFront", "run_gateway_front"]

logger = logging.getLogger("toolnexus_trio.mcp.gateway")

POLL_SECONDS: Final = 2.0
"""How often the instances directory is read for new hosts."""
NOTIFY_BOUND: Final = 1.0
"""Seconds a ``list_changed`` may take to go out; a stuck client is skipped."""
DEFAULT_MAX_TOKENS: Final = 1024
URI_SCHEME: Final = "tesseron://"
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
    """The MCP request an invocation was made for (the ContextVar's value)."""

    __slots__ = ("app_id", "ctx", "cursor", "token")

    def __init__(self, ctx: ServerRequestContext[Any], app_id: str) -> None:
        self.ctx = ctx
        self.app_id = app_id
        meta = ctx.meta
        self.token: str | int | None = meta.get("progress_token") if meta else None
        self.cursor = 0  # MCP progress must increase


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
        )
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
        session = ctx.session
        self._session = session
        info = session.client_params.client_info if session.client_params else None
        name = info.name if info is not None else "mcp-client"
        self.gateway.set_agent(
            Agent(id=name, name=name),
            sampling=session.check_client_capability(_SAMPLING),
            elicitation=session.check_client_capability(_ELICITATION),
        )
        await trio.lowlevel.checkpoint()

    def _client_name(self, ctx: ServerRequestContext[Any]) -> str:
        params = ctx.session.client_params
        return params.client_info.name if params is not None else "mcp-client"

    # ------------------------------------------------------------------ tools

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
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
    ) -> types.CallToolResult:
        args = dict(params.arguments or {})
        name = params.name
        try:
            if name.startswith(META_PREFIX):
                return await self._meta(ctx, name, args)
            target = self.gateway.tool_target(name)
            if target is None:
                raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")
            session, manifest = target
            return await self._invoke(ctx, session.app.id, manifest.name, args)
        except ActionError as exc:
            return _error(exc)

    async def _invoke(
        self, ctx: ServerRequestContext[Any], app_id: str, action: str, args: Any
    ) -> types.CallToolResult:
        self._check_claimed(app_id)
        call = _Call(ctx, app_id)
        # A tools/call made while a sampling of ours is in flight is (most likely) made
        # by that sampling's model: it nests one level deeper (the reference's heuristic).
        depth_token = sampling_depth.set(max(self._sampling_depths, default=0))
        call_token = current_call.set(call)
        run_token = current_run.set(RunServices(emit=self._emit, metric=None, sample=None))
        try:
            output = await self.gateway.invoke(app_id, action, args)
        finally:
            current_run.reset(run_token)
            current_call.reset(call_token)
            sampling_depth.reset(depth_token)
        return _ok(output)

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
        self, ctx: ServerRequestContext[Any], name: str, args: dict[str, Any]
    ) -> types.CallToolResult:
        gw = self.gateway
        if name == "tesseron__claim_session":
            code = args.get("code")
            if not isinstance(code, str):
                raise ActionError(TesseronErrorCode.INVALID_PARAMS, "code must be a string")
            session = gw.claim(code)
            await trio.lowlevel.checkpoint()
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
            return await self._invoke(ctx, app_id, action, {} if inner is None else inner)
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
        if call is None:
            return
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
        if not ctx.session.check_client_capability(_SAMPLING):
            name = self._client_name(ctx)
            raise ActionError(
                TesseronErrorCode.SAMPLING_NOT_AVAILABLE,
                f"The agent ({name}) does not support sampling",
                {"clientName": name},
            )
        depth = sampling_depth.get()  # set by the gateway for this request's task
        self._sampling_depths.append(depth)
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
            raise ActionError(TesseronErrorCode.HANDLER_ERROR, f"Sampling failed: {exc}") from None
        finally:
            self._sampling_depths.remove(depth)
        content = result.content
        return content.text if isinstance(content, types.TextContent) else str(content)

    async def wait_for(self, request: WaitRequest) -> Answer:
        """The gateway's ``wait_for``: a host's ``elicitation/request`` as a form elicitation."""
        call = current_call.get()
        if call is None or not call.ctx.session.check_client_capability(_ELICITATION):
            raise ActionError(
                TesseronErrorCode.ELICITATION_NOT_AVAILABLE,
                "The agent does not support elicitation",
            )
        ctx = call.ctx
        params = elicitation_from_request(request, url_supported=False)
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
            # Until the client's initialize says otherwise, hosts hear "no sampling or
            # elicitation" (corrected by tesseron/claimed, as the reference does).
            gateway.set_agent(
                Agent(id="pending", name="Awaiting agent"), sampling=False, elicitation=False
            )
            front = GatewayFront(gateway, instances_dir)
            holder.append(front)
            async with capped_stdio_server() as (read, write), trio.open_nursery() as nursery:
                nursery.start_soon(front.discover_forever, announce)
                nursery.start_soon(front.notify_changes)
                nursery.start_soon(front.forward_updates)
                await front.server.run(read, write, front.init_options())
                nursery.cancel_scope.cancel()
    return 0
