"""The tools of ``gateway --mcp``: the meta tools, the app tools, and the calls they make.

:class:`ToolHandlers` is a mixin of :class:`~toolnexus_trio.gateway._mcp_front.GatewayFront`
holding ``tools/list`` and ``tools/call``: the ``tesseron__*`` meta tools (claim, list,
invoke, read, pending claims), one ``<app_id>__<action>`` tool per action of a claimed,
live session, and the invocation behind each call. A handshake-era call invokes in the
handler's task; a 2026-07-28 call is parked (:mod:`._mcp_park`): the invocation runs in
a task of its own, and the call goes on over ``InputRequiredResult`` rounds until it ends.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from .._runctx import RunServices, current_run
from ..tesseron._errors import ActionError, TesseronErrorCode
from ._gateway import Gateway
from ._invoke import sampling_depth
from ._mcp_call import _Call, _error, _modern, _ok, current_call
from ._mcp_park import KEEP_SECONDS, MAX_PARKS, Park, args_digest

__all__ = ["META_PREFIX", "META_TOOLS", "ToolHandlers"]

logger = logging.getLogger("toolnexus_trio.mcp.gateway")

META_PREFIX: Final = "tesseron__"


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


class ToolHandlers:
    """``tools/list`` and ``tools/call`` of :class:`._mcp_front.GatewayFront` (a mixin)."""

    gateway: Gateway
    nursery: trio.Nursery | None
    _sampling_depths: list[int]
    _parks: dict[str, tuple[Park, _Call]]

    if TYPE_CHECKING:

        def _learn_agent(self, ctx: ServerRequestContext[Any]) -> None: ...
        async def _emit(self, event: dict[str, Any]) -> None: ...

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
