"""A toolkit's MCP server face (SPEC §7C): list, call, cancel, progress, suspension.

Long because the ways a call is answered (plain, by elicitation, parked between
``input_required`` rounds, as an MCP task) share its helpers here.

:class:`ServedToolkit` builds the SDK's low-level ``Server`` for a toolkit; the
transports (streamable HTTP on hypercorn, stdio) live in :mod:`._serving`.

- ``tools/list``: the toolkit's names verbatim, filtered by ``MCPServeConfig.tools``.
- ``tools/call``: :meth:`Tool.call` with a :class:`ToolContext` whose ``call_id`` is
  the request id. The client's ``notifications/cancelled`` cancels the handler's task,
  so the tool is cancelled at once (and its ``ctx.cancel`` token is set).
- The tool's ``progress``/``log`` events (a Tesseron action, an MCP tool of our own
  source) become ``notifications/progress`` (only with a ``progressToken``) and
  ``notifications/message``.
- A tool that suspends (SPEC §10) is answered through the client: by elicitation
  (form for ``question``/``input``/``approval``, URL for ``authorization``) on a
  handshake-era connection, by ``InputRequiredResult`` on a 2026-07-28 one; it is
  re-run once with ``ctx.answer``. A client with neither gets an error that says
  what was asked. A relay tool (SPEC §10 addendum) is listed like any tool; a call asks
  the client itself to run it, by the same means, with a form of ``output`` and
  ``isError`` (the single-call shorthand), and the tool's result is what it sent.
- An inner MCP server's elicitation or sampling reached while running a tool is relayed
  to the client that advertised the capability (:mod:`._relay`): as a request on a
  handshake-era connection, as an ``InputRequiredResult`` round on a 2026-07-28 one,
  where the call is parked between rounds (:mod:`._park`).
- A ``tools/call`` with a ``task`` field (MCP Tasks, 2025-11-25) runs the tool as a
  task in the server's nursery (:mod:`._taskboard`).
- A change of ``toolkit.tools()`` (seen through ``Toolkit.wait_changed``, no polling)
  sends ``notifications/tools/list_changed`` to every connection (and to
  ``subscriptions/listen`` streams).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
from typing import TYPE_CHECKING, Any, Final

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._cancel import CancelToken
from .._runctx import RunServices, current_run
from .._sampling import depth_from_meta, sampling_depth
from .._tools import Tool, ToolContext, ToolResult, ToolSource, pending_of
from .._tracing import mark_mcp_session
from .._wire import Answer, Request
from ._elicit import answer_from_elicit_result, elicitation_from_request
from ._hints import annotations_from_hints
from ._park import Park
from ._parts import mcp_content
from ._relay import Relay, can_elicit, can_sample
from ._taskboard import TASKS_CAPABILITY, TaskBoard
from ._types import CallInfo, MCPServeConfig, OnCall

if TYPE_CHECKING:
    from .._toolkit import Toolkit

logger = logging.getLogger("toolnexus_trio.mcp.serve")

NOTIFY_BOUND: Final = 1.0
"""Seconds one connection may take to accept a ``list_changed``; a stuck one is skipped."""
INPUT_KEY: Final = "toolnexus"
"""The key of our one entry in ``InputRequiredResult.input_requests``."""
_LOG_LEVELS: Final = frozenset(
    {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}
)
_ELICITATION = types.ClientCapabilities(elicitation=types.ElicitationCapability())
_AS_TASK = types.ToolExecution(task_support="optional")


def _args_digest(args: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()


class _ToolkitServer(Server[Any]):
    """The SDK's server, advertising ``tools.listChanged`` on every transport (the HTTP
    session manager asks the server itself for its initialization options)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        options = super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )
        # MCP Tasks (2025-11-25): our tools run as tasks for a client that asks.
        options.capabilities = options.capabilities.model_copy(update={"tasks": TASKS_CAPABILITY})
        return options


async def _session_on_span(ctx: ServerRequestContext[Any], call_next: Any) -> Any:
    """Server middleware after the SDK's OpenTelemetry one (so inside its SERVER span):
    the MCP conventions' ``mcp.session.id``, which the SDK leaves out, on that span.

    The lowlevel context has no public session id, but over streamable HTTP it carries
    the HTTP request, whose ``Mcp-Session-Id`` header (sent on every request after
    ``initialize``) is that id; stdio has none."""
    headers = getattr(ctx.request, "headers", None)
    mark_mcp_session(headers.get("mcp-session-id") if headers is not None else None)
    return await call_next(ctx)


class ServedToolkit:
    """The MCP server for *toolkit* (one per serve; many connections)."""

    def __init__(
        self, toolkit: Toolkit, config: MCPServeConfig | None, on_call: OnCall | None
    ) -> None:
        self.toolkit = toolkit
        self.config = config or MCPServeConfig()
        self.on_call = on_call
        self._bus = InMemorySubscriptionBus()
        self._key = secrets.token_bytes(32)  # seals request_state; never leaves the process
        self._exposed: dict[str, Tool] = {}
        self._exposed_of: object = None
        self._listing: types.ListToolsResult | None = None
        self._sessions: dict[int, Any] = {}
        self._parks: dict[str, Park] = {}  # request_state -> a parked 2026-07-28 call
        self.nursery: trio.Nursery | None = None
        """Where parked (2026-07-28) calls run between rounds; set by the transport."""
        self.server: Server[Any] = _ToolkitServer(
            self.config.name,
            version=self.config.version,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self._bus),
        )
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._initialized
        )
        # Listed outermost-first: appended, it runs inside the SDK's span middleware.
        self.server.middleware.append(_session_on_span)
        TaskBoard(self.exposed, self._run_task, lambda: self.nursery).install(self.server)

    def init_options(self) -> InitializationOptions:
        """What ``initialize`` answers: our ``serverInfo``, ``tools.listChanged``."""
        return self.server.create_initialization_options()

    # ------------------------------------------------------------------ tools

    def exposed(self) -> dict[str, Tool]:
        """The served tools by name (recomputed only when the toolkit's tools change)."""
        current = self.toolkit._current()
        if current is not self._exposed_of:
            wanted = self.config.tools
            if wanted is None:
                self._exposed = dict(current)
            else:
                self._exposed = {n: current[n] for n in wanted if n in current}
            self._exposed_of, self._listing = current, None
        return self._exposed

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        exposed = self.exposed()
        if self._listing is None:
            self._listing = types.ListToolsResult(
                tools=[
                    types.Tool(
                        name=t.name,
                        description=t.description,
                        input_schema=t.input_schema,
                        output_schema=t.output_schema,
                        annotations=annotations_from_hints(t.hints),
                        execution=None if t.source is ToolSource.RELAY else _AS_TASK,
                    )
                    for t in exposed.values()
                ]
            )
        return self._listing

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        tool = self.exposed().get(params.name)
        if tool is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        args = dict(params.arguments or {})
        started = trio.current_time()
        # A call made from inside a sampling request says how deep (see _sampling).
        depth = sampling_depth.set(depth_from_meta(params.meta))
        try:
            return await self._call(ctx, tool, params, args, started)
        finally:
            sampling_depth.reset(depth)

    async def _call(
        self,
        ctx: ServerRequestContext[Any],
        tool: Tool,
        params: types.CallToolRequestParams,
        args: dict[str, Any],
        started: float,
    ) -> types.CallToolResult | types.InputRequiredResult:
        park = self._parks.get(params.request_state or "")
        if park is not None:
            return await self._resume(ctx, park, tool, params, args, started)
        parks = self._parks_for(ctx)
        if params.request_state is not None:
            asked = self._unseal(params.request_state, tool.name, args)
            answer = self._answer_from_inputs(asked, params.input_responses)
            if parks and (answer.ok or tool.source is ToolSource.RELAY):
                return await self._park(ctx, tool, args, started, asked, answer)
            result = await self._resolved(ctx, tool, args, asked, answer)
        elif parks:
            return await self._park(ctx, tool, args, started, None, None)
        else:
            result = await self._run(ctx, tool, args, None)
            request = pending_of(result)
            if request is not None:
                if not ctx.session.check_client_capability(_ELICITATION):
                    result = _unanswerable(result, request)
                elif ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    return self._input_required(request, tool, args)
                else:
                    result = await self._by_elicitation(ctx, tool, args, request)
        self._report(tool, started, result)
        return _call_result(tool, result)

    async def _run(
        self,
        ctx: ServerRequestContext[Any],
        tool: Tool,
        args: dict[str, Any],
        answer: Answer | None,
        park: Park | None = None,
    ) -> ToolResult:
        token = CancelToken()
        tool_ctx = ToolContext(cancel=token, call_id=str(ctx.request_id), answer=answer)
        forward = _Forward(ctx, park)
        relay = Relay(ctx, park)
        reset = current_run.set(
            RunServices(
                emit=forward.emit,
                metric=None,
                sample=relay.sample_text if relay.samples else None,
                elicit=relay.elicit if relay.elicits else None,
                relay_sample=relay.sample if relay.samples else None,
            )
        )
        try:
            return await tool.call(args, tool_ctx)
        except trio.Cancelled:
            # The client cancelled (notifications/cancelled): say so to the tool too.
            token.cancel("cancelled by the MCP client")
            raise
        finally:
            current_run.reset(reset)

    async def _run_task(
        self, tool: Tool, args: dict[str, Any], task_id: str
    ) -> types.CallToolResult:
        """A call run as an MCP task (:mod:`._taskboard`): its request is answered, so
        nothing is relayed to the client, and a suspension ends it with what it asked."""
        started = trio.current_time()
        token = CancelToken()
        try:
            result = await tool.call(args, ToolContext(cancel=token, call_id=task_id))
        except trio.Cancelled:
            token.cancel("cancelled by the MCP client (tasks/cancel)")
            raise
        request = pending_of(result)
        if request is not None:
            result = ToolResult.error(
                f"{result.output}\n\nThe tool is waiting for {request.kind}: {request.prompt}. "
                "A tool run as an MCP task cannot be answered; call it without a task.",
                {"pending": request},
            )
        self._report(tool, started, result)
        return _call_result(tool, result)

    def _report(self, tool: Tool, started: float, result: ToolResult) -> None:
        if self.on_call is None:
            return
        info = CallInfo(
            tool.name, tool.source.value, (trio.current_time() - started) * 1000, result.is_error
        )
        try:
            self.on_call(info)
        except Exception:
            logger.exception("on_call raised; the call's answer is not affected")

    # ------------------------------------------------------------------ parked calls

    def _parks_for(self, ctx: ServerRequestContext[Any]) -> bool:
        """Whether a call of *ctx* runs parked: a 2026-07-28 client that can answer an
        inner server's elicitation or sampling (else it runs in the handler, as before)."""
        return (
            self.nursery is not None
            and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
            and (can_elicit(ctx) or can_sample(ctx))
        )

    async def _park(
        self,
        ctx: ServerRequestContext[Any],
        tool: Tool,
        args: dict[str, Any],
        started: float,
        asked: Request | None,
        answer: Answer | None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Run the tool in a task of its own, so a relayed question can go out as a round."""
        if self.nursery is None or len(self._parks) >= self.config.max_parked:
            result = ToolResult.error(
                f"Too many calls in flight (at most {self.config.max_parked} at once)"
            )
            self._report(tool, started, result)
            return types.CallToolResult(
                content=[types.TextContent(text=result.output)], is_error=True
            )
        park = Park(tool.name, _args_digest(args), self.config.answer_seconds, asked, answer)
        self._parks[park.id] = park
        self.nursery.start_soon(self._run_parked, ctx, park, tool, args)
        return await self._round(ctx, park, tool, args, started)

    async def _run_parked(
        self, ctx: ServerRequestContext[Any], park: Park, tool: Tool, args: dict[str, Any]
    ) -> None:
        try:
            with park.scope:
                try:
                    park.finish(await self._run(ctx, tool, args, park.answer, park))
                except Exception as exc:  # the call ends as a tool error, serving goes on
                    logger.exception("the parked call of %s failed", tool.name)
                    park.finish(ToolResult.error(f"{tool.name} failed: {exc}"))
            if park.outcome is not None:
                with trio.move_on_after(self.config.keep_seconds):  # for a retry to collect
                    await park.collected.wait()
        finally:
            self._parks.pop(park.id, None)
            if park.outcome is None:  # cancelled: a round still waiting hears so
                park.finish(ToolResult.error(f"{tool.name} was cancelled"))

    async def _resume(
        self,
        ctx: ServerRequestContext[Any],
        park: Park,
        tool: Tool,
        params: types.CallToolRequestParams,
        args: dict[str, Any],
        started: float,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """A retry with answers: hand them to the waiting relayed requests, then go on."""
        if park.round_open or park.tool != tool.name or park.digest != _args_digest(args):
            raise MCPError(
                code=types.INVALID_PARAMS, message="request_state is not ours or not for this call"
            )
        park.answer_round(params.input_responses or {})
        return await self._round(ctx, park, tool, args, started)

    async def _round(
        self,
        ctx: ServerRequestContext[Any],
        park: Park,
        tool: Tool,
        args: dict[str, Any],
        started: float,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Wait for the parked call's result, or for questions to send the client."""
        park.ctx = ctx
        park.round_open = True
        done = False
        try:
            step = await park.next_step()
            done = True
        finally:
            park.round_open = False
            if not done:  # the client cancelled this request, or serving stops
                park.scope.cancel(reason="the MCP request was cancelled")
        if isinstance(step, dict):
            return types.InputRequiredResult(input_requests=step, request_state=park.id)
        self._parks.pop(park.id, None)  # spent: a replay of its request_state is refused
        result = step
        if park.asked is not None:
            if pending_of(result) is not None:
                result = ToolResult.error(f"unresolved: {park.asked.prompt}")
        else:
            request = pending_of(result)
            if request is not None:
                if can_elicit(ctx):
                    return self._input_required(request, tool, args)
                result = _unanswerable(result, request)
        self._report(tool, started, result)
        return _call_result(tool, result)

    # ------------------------------------------------------------------ suspension

    async def _by_elicitation(
        self, ctx: ServerRequestContext[Any], tool: Tool, args: dict[str, Any], request: Request
    ) -> ToolResult:
        caps = ctx.session.client_capabilities
        url_ok = bool(caps and caps.elicitation and caps.elicitation.url is not None)
        relay = tool.source is ToolSource.RELAY
        params = elicitation_from_request(request, url_supported=url_ok, relay=relay)
        try:
            if params["mode"] == "url":
                reply = await ctx.session.elicit_url(
                    params["message"], params["url"], params["elicitationId"], ctx.request_id
                )
            else:
                reply = await ctx.session.elicit_form(
                    params["message"], params["requestedSchema"], ctx.request_id
                )
            answer = answer_from_elicit_result(
                request, reply.model_dump(by_alias=True, mode="json", exclude_none=True)
            )
        except (MCPError, ValueError) as exc:
            logger.warning("elicitation for %s failed: %s", tool.name, exc)
            answer = Answer(request.id, False, reason="cancelled")
        return await self._resolved(ctx, tool, args, request, answer)

    async def _resolved(
        self,
        ctx: ServerRequestContext[Any],
        tool: Tool,
        args: dict[str, Any],
        request: Request,
        answer: Answer,
    ) -> ToolResult:
        """SPEC §10's rule: re-run once on ``ok``; a refusal or a second suspension is an error."""
        if not answer.ok and tool.source is not ToolSource.RELAY:  # a relay words its own
            return ToolResult.error(f"declined/expired: {request.prompt}")
        result = await self._run(ctx, tool, args, answer)
        if pending_of(result) is not None:
            return ToolResult.error(f"unresolved: {request.prompt}")
        return result

    def _input_required(
        self, request: Request, tool: Tool, args: dict[str, Any]
    ) -> types.InputRequiredResult:
        relay = tool.source is ToolSource.RELAY
        params = elicitation_from_request(request, url_supported=True, with_id=False, relay=relay)
        if params["mode"] == "url":
            inner: types.ElicitRequestParams = types.ElicitRequestURLParams(
                message=params["message"], url=params["url"]
            )
        else:
            inner = types.ElicitRequestFormParams(
                message=params["message"], requested_schema=params["requestedSchema"]
            )
        return types.InputRequiredResult(
            input_requests={INPUT_KEY: types.ElicitRequest(params=inner)},
            request_state=self._seal(request, tool.name, args),
        )

    def _seal(self, request: Request, tool: str, args: dict[str, Any]) -> str:
        # The client echoes this back: sign it, and bind it to this tool and arguments.
        body = json.dumps(
            {"request": request.to_json(), "tool": tool, "args": _args_digest(args)},
            separators=(",", ":"),
        ).encode()
        mac = hmac.new(self._key, body, hashlib.sha256).digest()
        return f"{base64.urlsafe_b64encode(body).decode()}.{base64.urlsafe_b64encode(mac).decode()}"

    def _unseal(self, state: str, tool: str, args: dict[str, Any]) -> Request:
        try:
            body_b64, mac_b64 = state.split(".")
            body = base64.urlsafe_b64decode(body_b64)
            good = hmac.compare_digest(
                hmac.new(self._key, body, hashlib.sha256).digest(),
                base64.urlsafe_b64decode(mac_b64),
            )
            sealed = json.loads(body) if good else None
        except ValueError:
            sealed = None
        if (
            not isinstance(sealed, dict)
            or sealed.get("tool") != tool
            or sealed.get("args") != _args_digest(args)
        ):
            raise MCPError(
                code=types.INVALID_PARAMS, message="request_state is not ours or not for this call"
            )
        return Request.from_json(sealed["request"])

    @staticmethod
    def _answer_from_inputs(request: Request, inputs: types.InputResponses | None) -> Answer:
        reply = (inputs or {}).get(INPUT_KEY)
        if not isinstance(reply, types.ElicitResult):
            return Answer(request.id, False, reason="cancelled")
        try:
            return answer_from_elicit_result(
                request, reply.model_dump(by_alias=True, mode="json", exclude_none=True)
            )
        except ValueError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None

    # ------------------------------------------------------------------ list_changed

    async def _initialized(
        self, ctx: ServerRequestContext[Any], params: types.NotificationParams | None
    ) -> None:
        # Remember the connection for list_changed until it closes. The SDK gives the
        # connection (and its exit stack) only through the session's private field.
        connection = getattr(ctx.session, "_connection", None)
        stack = getattr(connection, "exit_stack", None)
        if connection is None or stack is None:
            return
        key = id(connection)
        self._sessions[key] = ctx.session
        stack.callback(self._sessions.pop, key, None)
        await trio.lowlevel.checkpoint()

    async def watch_changes(self) -> None:
        """Send ``tools/list_changed`` whenever the served tool set changes (run as a task).

        Parks on :meth:`Toolkit.wait_changed` between changes: nothing runs while the
        tools stay the same, and a change is sent at once."""
        version = self.toolkit.version
        seen = self.exposed()
        while True:
            version = await self.toolkit.wait_changed(version)
            now = self.exposed()
            if now is seen or now == seen:
                continue
            seen = now
            async with trio.open_nursery() as nursery:
                for session in list(self._sessions.values()):
                    nursery.start_soon(self._notify, session)
            await self._bus.publish(ToolsListChanged())

    @staticmethod
    async def _notify(session: Any) -> None:
        with trio.move_on_after(NOTIFY_BOUND):
            await session.send_tool_list_changed()


def _unanswerable(suspended: ToolResult, request: Request) -> ToolResult:
    return ToolResult.error(
        f"{suspended.output}\n\nThe tool is waiting for {request.kind}: {request.prompt}. "
        "This MCP client supports neither elicitation nor input_required, so it cannot be "
        "answered here.",
        {"pending": request},
    )


class _Forward:
    """A served call's ``progress``/``log`` events to the MCP client of that request."""

    def __init__(self, ctx: ServerRequestContext[Any], park: Park | None = None) -> None:
        self.ctx = ctx
        self.park = park
        self.cursor = -1.0
        self.legacy = ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS

    async def emit(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if self.park is not None:
            if not self.park.round_open:
                return  # between rounds no request carries it
            self.ctx = self.park.ctx
        try:
            if kind == "progress":
                await self._progress(event)
            elif kind == "log" and self.legacy:
                await self._log(event)
        except Exception as exc:  # the client's stream may be gone: the call goes on
            logger.debug("dropped a %s notification: %s", kind, exc)

    async def _progress(self, event: dict[str, Any]) -> None:
        progress, total = event.get("progress"), event.get("total")
        if not isinstance(progress, int | float) or isinstance(progress, bool):
            progress, total = event.get("percent"), 100
        if not isinstance(progress, int | float) or isinstance(progress, bool):
            return
        if progress <= self.cursor:
            return  # MCP progress must increase
        self.cursor = float(progress)
        message = event.get("message")
        await self.ctx.session.report_progress(
            float(progress),
            float(total) if isinstance(total, int | float) else None,
            message if isinstance(message, str) else None,
        )

    async def _log(self, event: dict[str, Any]) -> None:
        level = str(event.get("level") or "info").lower()
        level = "warning" if level == "warn" else level
        if level not in _LOG_LEVELS:
            level = "info"
        meta = event.get("meta")
        data: dict[str, Any] = {"message": event.get("message")}
        if isinstance(meta, dict):
            data.update(meta)
        notification = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(
                level=level,  # type: ignore[arg-type]  # checked against _LOG_LEVELS above
                data=data,
                logger=str(event.get("tool") or "toolnexus"),
            )
        )
        await self.ctx.session.send_notification(notification, self.ctx.request_id)


def _call_result(tool: Tool, result: ToolResult) -> types.CallToolResult:
    """The MCP result of a call: its text, and for a tool with an ``output_schema`` its
    value as ``structuredContent`` (the text is that value's JSON, as the model sees it)."""
    structured: dict[str, Any] | None = None
    if tool.output_schema is not None and not result.is_error:
        try:
            value = json.loads(result.output)
        except ValueError:
            value = None  # a tool that returned text after all: no structured content
        else:
            structured = {"result": value} if tool.output_wrapped else value
            if not isinstance(structured, dict):
                structured = None
    return types.CallToolResult(
        content=mcp_content(result.output, result.parts),
        structured_content=structured,
        is_error=result.is_error,
    )
