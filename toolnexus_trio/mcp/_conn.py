"""One configured MCP server: connect, list, call, and keep its tools current.

Long because a call's ways through one session (plain, answered by us on the
server's questions, as an MCP task; each with its client span) share that session's
state here; tasks are in :mod:`._tasks`.

A connection is one long-lived task (:meth:`ServerConn.run`, started with
``nursery.start``): it opens the transport (stdio; streamable HTTP, or HTTP+SSE when a
remote server refuses the first with a 4xx) and the SDK session, runs the load phases
(``initialize``, ``tools/list`` with pagination), each under the server's ``timeout``,
reports started, and then waits for ``notifications/tools/list_changed`` to refresh
the tools, until it is closed. Everything the server sends that is not a reply is
handled without awaiting user code in the SDK's tasks: progress is queued (in wire
order, by a tap on the receive loop) for the calling task to forward, and
``list_changed`` sets an event.

The HTTP clients and their answer cap are in :mod:`._http`, the progress routing in
:mod:`._progress`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final, cast
from urllib.parse import urlsplit

import httpx2
import mcp_types as types
import trio
from mcp.client.session import ClientRequestContext, ClientSession, IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from .. import _tracing
from .._groups import collapse_groups
from .._runctx import current_resume, current_run
from .._sampling import DEPTH_META, Sampler, SamplingLimits, sampling_depth
from .._tools import Tool, ToolContext, ToolHints, ToolResult, ToolSource
from .._version import __version__
from .._wire import Answer, Request
from ._asks import ActiveCall, Desk, Refused, Sampling
from ._config import McpServerConfig, filter_tools, mcp_tool_name
from ._elicit import elicit_result_from_answer, request_from_elicitation
from ._hints import hints_from_annotations
from ._http import ANSWER_TOO_LARGE, new_http_client, ssl_context
from ._limits import MAX_LISTING_BYTES, MAX_MESSAGE_BYTES, MAX_TOOLS, size_text
from ._parts import parts_of
from ._progress import CallProgress, ReadTap, WriteTap
from ._stdio import StdioTransport, open_stdio
from ._tasks import TaskCall, server_runs_tasks, task_support
from ._types import McpStatus, McpToolInfo

logger = logging.getLogger("toolnexus_trio.mcp")

WaitFor = Callable[[Request], Awaitable[Answer]]

MAX_PAGES: Final = 1000
"""``tools/list`` pages followed before a server is considered broken."""
MAX_ELICITATIONS: Final = 16
"""Elicitations of one server answered at once; more are refused (a flood stays bounded)."""
CLOSE_BOUND: Final = 3.0
"""Seconds a close waits for a connection to wind down (the stdio shutdown is ~2.5 s)."""
CLIENT_INFO: Final = types.Implementation(name="toolnexus-trio", version=__version__)
_OPEN_SCHEMA: Final[dict[str, Any]] = {"type": "object"}


class LoadError(Exception):
    """A load phase of one server failed (the message is its status reason)."""


def result_text(result: types.CallToolResult) -> tuple[str, bool]:
    """SPEC §2's mapping: an error joins its text parts (``"\\n\\n"``); structured
    content is compact JSON; otherwise text parts and embedded text resources joined
    by ``"\\n"``."""
    texts: list[str] = []
    for part in result.content:
        if isinstance(part, types.TextContent):
            texts.append(part.text)
        elif isinstance(part, types.EmbeddedResource) and isinstance(
            part.resource, types.TextResourceContents
        ):
            texts.append(part.resource.text)
    if result.is_error:
        return "\n\n".join(t for t in texts if t) or "MCP tool returned an error", True
    if result.structured_content is not None:
        return json.dumps(result.structured_content, separators=(",", ":")), False
    return "\n".join(texts), False


class ServerConn:
    """One configured server: its status, live session and current tools."""

    def __init__(
        self,
        config: McpServerConfig,
        wait_for: WaitFor | None,
        on_change: Callable[[], None],
        *,
        sampler: Sampler | None = None,
        limits: SamplingLimits | None = None,
        relay_to_client: bool = False,
    ) -> None:
        self.config = config
        self.status = (
            McpStatus("disabled") if not config.enabled else McpStatus("failed", "not loaded")
        )
        self.session: ClientSession | None = None
        self.infos: list[McpToolInfo] = []
        self.tools: list[Tool] = []
        self._wait_for = wait_for
        self._on_change = on_change
        self._changed = trio.Event()
        self._stop = trio.Event()
        self._scope: trio.CancelScope | None = None
        self._done = trio.Event()
        self._running = False
        self._built: dict[str, tuple[tuple[str, ToolHints | None], Tool]] = {}
        self._elicitations = 0
        self._progress: dict[str, CallProgress] = {}
        self._tokens = itertools.count(1)
        self._stdio: StdioTransport | None = None
        self._sampling = (
            Sampling(config.name, sampler, limits or SamplingLimits())
            if sampler is not None or relay_to_client
            else None
        )
        self._elicits = wait_for is not None or relay_to_client
        self._desk = Desk()
        self._dispatcher: JSONRPCDispatcher[Any] | None = None
        self._task_tools: dict[str, str] = {}  # tool -> its taskSupport (optional, required)
        self._session_id: str | None = None  # streamable HTTP's Mcp-Session-Id

    # ------------------------------------------------------------------ lifecycle

    @property
    def bound(self) -> float:
        """One load phase's bound, in seconds."""
        return self.config.timeout_ms / 1000

    def _client(self, read: Any, write: Any) -> ClientSession:
        # Our own dispatcher (the SDK's public one, as the session would build it): a
        # task-augmented tools/call goes through it, because the session checks every
        # tools/call answer against CallToolResult and a CreateTaskResult is not one.
        self._dispatcher = JSONRPCDispatcher(ReadTap(read, self._progress), WriteTap(write))
        return ClientSession(
            dispatcher=self._dispatcher,
            elicitation_callback=self._elicit if self._elicits else None,
            sampling_callback=self._sample if self._sampling is not None else None,
            message_handler=self._on_message,
            client_info=CLIENT_INFO,
        )

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[tuple[ClientSession, StdioTransport | None]]:
        """An initialized session (and the stdio transport when local). A remote server
        is tried over streamable HTTP first; when it rejects that ``initialize`` with an
        HTTP 4xx (a legacy server: no POST at its URL), over HTTP+SSE (SPEC §2's fallback,
        the MCP spec's backwards-compatibility rule). Each attempt's phases are bounded."""
        if self.config.type == "local":
            async with open_stdio(self.config) as stdio, self._client(stdio.read, stdio.write) as s:
                self._stdio = stdio
                await self._phase("initialize", s.initialize)
                yield s, stdio
            return
        verify = await ssl_context()
        rejected: str | None = None
        if self.config.transport != "sse":
            statuses: list[int] = []
            opened = False
            try:
                async with self._streamable(verify, statuses) as session:
                    opened = True
                    yield session, None
                return
            except MCPError as exc:
                first = statuses[0] if statuses else 0
                if opened or self.config.transport != "auto" or not 400 <= first < 500:
                    raise
                rejected = f"streamable HTTP answered {first} ({exc.error.message})"
            logger.info("MCP server %r: %s; trying HTTP+SSE", self.config.name, rejected)
        opened = False
        try:
            async with self._sse(verify) as session:
                opened = True
                yield session, None
        except Exception as exc:
            if opened or rejected is None:
                raise
            reason = (str(exc) or type(exc).__name__).splitlines()[0]
            raise LoadError(f"{rejected}; SSE fallback: {reason}") from exc

    @contextlib.asynccontextmanager
    async def _streamable(
        self, verify: ssl.SSLContext, statuses: list[int]
    ) -> AsyncIterator[ClientSession]:
        async def seen(response: httpx2.Response) -> None:
            if response.request.method == "POST":
                statuses.append(response.status_code)  # the first is initialize's
                # The session the server gave (initialize's answer), for the spans.
                self._session_id = response.headers.get("mcp-session-id") or self._session_id

        assert self.config.url is not None
        self._session_id = None
        # A response stream may stay open for minutes; connect/write obey the load bound.
        timeout = httpx2.Timeout(self.bound, read=300.0)
        with collapse_groups():
            async with (
                new_http_client(self.config, verify, timeout, {"response": [seen]}) as http,
                streamable_http_client(
                    self.config.url, http_client=http, max_sse_event_size=MAX_MESSAGE_BYTES
                ) as (read, write),
                self._client(read, write) as session,
            ):
                await self._phase("initialize", session.initialize)
                yield session

    @contextlib.asynccontextmanager
    async def _sse(self, verify: ssl.SSLContext) -> AsyncIterator[ClientSession]:
        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return new_http_client(self.config, verify, timeout or httpx2.Timeout(self.bound))

        assert self.config.url is not None
        # Connecting is the GET plus the wait for the `endpoint` event; a server that
        # accepts and then says nothing must not hold us for the 300 s read timeout.
        # The scope has to enclose the transport's whole life (it opens a task group),
        # so it is bounded until connected and unbounded after.
        connect = trio.CancelScope(deadline=trio.current_time() + self.bound)
        with connect, collapse_groups():
            async with sse_client(
                self.config.url, timeout=self.bound, httpx_client_factory=factory
            ) as (read, write):
                connect.deadline = math.inf
                async with self._client(read, write) as session:
                    await self._phase("initialize", session.initialize)
                    yield session
        if connect.cancelled_caught:
            raise LoadError(f"connect timed out after {self.config.timeout_ms:g}ms")

    async def run(
        self,
        *,
        list_only: bool = False,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Connect and load (each phase bounded), report started, then keep the tools
        current until :meth:`close`. A failure before started raises :class:`LoadError`
        (or the transport's error) to the ``nursery.start`` caller."""
        self._running = True
        try:
            with trio.CancelScope() as self._scope, collapse_groups():
                async with self._open() as (session, stdio):
                    infos = await self._phase("tools/list", lambda: self._list_all(session))
                    self.session = session
                    self._install(infos)
                    if stdio is not None:
                        stdio.graceful = True
                    task_status.started()
                    if not list_only:
                        await self._watch(session, stdio)
        finally:
            self.session = None
            self._done.set()

    async def _phase(self, name: str, step: Callable[[], Awaitable[Any]]) -> Any:
        with trio.move_on_after(self.bound) as scope:
            try:
                return await step()
            except MCPError as exc:
                reason = self._explain(exc)
                if reason is None:
                    raise
                raise LoadError(f"{name}: {reason}") from exc
        assert scope.cancelled_caught
        raise LoadError(f"{name} timed out after {self.config.timeout_ms:g}ms")

    def _explain(self, exc: MCPError) -> str | None:
        """The limit behind *exc*, when one is (the SDK says only "Connection closed"
        for a stdio server we cut off, and wraps a capped HTTP answer as a parse error)."""
        stdio = self._stdio
        if (
            stdio is not None
            and stdio.read.error is not None
            and exc.error.code == types.CONNECTION_CLOSED
        ):
            return stdio.read.error
        message = exc.error.message or ""
        at = message.find(ANSWER_TOO_LARGE)
        return message[at:] if at >= 0 else None

    async def _watch(self, session: ClientSession, stdio: StdioTransport | None) -> None:
        async with trio.open_nursery() as nursery:
            if stdio is not None:
                nursery.start_soon(self._watch_exit, stdio, nursery.cancel_scope)
            nursery.start_soon(self._watch_stop, nursery.cancel_scope)
            while True:
                await self._changed.wait()
                self._changed = trio.Event()  # updates arriving meanwhile: one more relist
                try:
                    with trio.fail_after(self.bound):
                        infos = await self._list_all(session)
                except (Exception, trio.TooSlowError) as exc:
                    logger.warning(
                        "MCP server %r: refreshing tools failed: %s", self.config.name, exc
                    )
                    continue
                self._install(infos)

    async def _watch_stop(self, scope: trio.CancelScope) -> None:
        await self._stop.wait()
        scope.cancel()

    async def _watch_exit(self, stdio: StdioTransport, scope: trio.CancelScope) -> None:
        await stdio.closed.wait()
        if self._stop.is_set():
            return
        code = stdio.process.poll()
        if stdio.read.error is not None:
            reason = stdio.read.error
        elif code is None:
            reason = "server closed its output"
        else:
            reason = f"server exited with code {code}"
        logger.warning("MCP server %r: %s", self.config.name, reason)
        self.fail(reason)
        scope.cancel()

    def fail(self, error: BaseException | str) -> None:
        """Mark the server failed (its tools are gone) and log why."""
        reason = error if isinstance(error, str) else (str(error) or type(error).__name__)
        if isinstance(error, BaseException):
            logger.warning("MCP server %r failed: %s", self.config.name, reason)
        self.status = McpStatus("failed", reason)
        self.tools, self.infos = [], []
        self._on_change()

    async def close(self) -> None:
        """Wind the connection down (graceful for a connected stdio server), bounded."""
        self._stop.set()
        if not self._running:
            return
        if self._scope is not None:
            self._scope.deadline = min(self._scope.deadline, trio.current_time() + CLOSE_BOUND)
        with trio.move_on_after(CLOSE_BOUND + 1, shield=True):
            await self._done.wait()

    # ------------------------------------------------------------------ tools

    async def _list_all(self, session: ClientSession) -> list[McpToolInfo]:
        """Every page of ``tools/list``; the pages together are held to
        :data:`MAX_TOOLS` tools and :data:`MAX_LISTING_BYTES` (each page, as any message,
        to the message cap): pagination must not add up to more than one answer may."""
        infos: list[McpToolInfo] = []
        tasks: dict[str, str] = {}
        cursor: str | None = None
        seen: set[str] = set()
        size = 0
        for _ in range(MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            with _tracing.mcp_span("tools/list", None, lambda: self._span_attributes(session)):
                page = await session.list_tools(params=params)
            if len(infos) + len(page.tools) > MAX_TOOLS:
                raise LoadError(f"tools/list: more than {MAX_TOOLS} tools (the limit per server)")
            # The page as JSON again (no raw bytes reach us on every transport): near
            # its wire size, and linear.
            size += len(page.model_dump_json(by_alias=True, exclude_none=True).encode())
            if size > MAX_LISTING_BYTES:
                raise LoadError(
                    f"tools/list: the tools take more than {size_text(MAX_LISTING_BYTES)} "
                    "(the limit per server, all pages)"
                )
            infos += [
                McpToolInfo(
                    t.name,
                    t.description or "",
                    dict(t.input_schema),
                    hints_from_annotations(t.annotations),
                )
                for t in page.tools
            ]
            tasks.update((t.name, support) for t in page.tools if (support := task_support(t)))
            cursor = page.next_cursor
            if not cursor:
                self._task_tools = tasks
                return infos
            if cursor in seen:
                raise LoadError(f"tools/list returned cursor {cursor!r:.40} twice")
            seen.add(cursor)
        raise LoadError(f"tools/list has more than {MAX_PAGES} pages")

    def _install(self, infos: list[McpToolInfo]) -> None:
        keep = set(filter_tools([i.name for i in infos], self.config.tools, self.config.name))
        self.infos = infos
        built: dict[str, tuple[tuple[str, ToolHints | None], Tool]] = {}
        tools: list[Tool] = []
        for info in infos:
            if info.name not in keep:
                continue
            key = json.dumps([info.description, info.input_schema], sort_keys=True), info.hints
            cached = self._built.get(info.name)
            made = cached[1] if cached is not None and cached[0] == key else self._make_tool(info)
            built[info.name] = (key, made)
            tools.append(made)
        self._built, self.tools = built, tools
        self.status = McpStatus("connected", None, len(tools))
        self._on_change()

    def _make_tool(self, info: McpToolInfo) -> Tool:
        name = mcp_tool_name(self.config.name, info.name)
        original = info.name

        async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return await self.call(original, name, args, ctx)

        schema = dict(info.input_schema)
        schema["type"] = "object"
        try:
            return Tool(name, info.description, schema, ToolSource.MCP, execute, info.hints)
        except Exception as exc:  # a hostile schema must not break the toolkit
            logger.warning(
                "MCP tool %s: input schema does not compile (%s); open object", name, exc
            )
            return Tool(
                name, info.description, dict(_OPEN_SCHEMA), ToolSource.MCP, execute, info.hints
            )

    async def call(
        self, tool: str, public_name: str, args: dict[str, Any], ctx: ToolContext
    ) -> ToolResult:
        """``tools/call`` *tool*; a cancel or timeout of the calling scope sends
        ``notifications/cancelled`` for the request (the SDK does, as the scope unwinds)."""
        session = self.session
        meta = {"server": self.config.name}
        if session is None:
            return ToolResult.error(f"MCP server {self.config.name!r} is not connected", meta)
        depth = sampling_depth.get()
        # Inside a sampling request: the server we call learns how deep it is.
        call_meta: dict[str, Any] = {DEPTH_META: depth} if depth else {}
        support = self._task_tools.get(tool)
        # An optional task is a plain call when the server may ask us things (sampling,
        # elicitation): a task's questions would need its input_required round trips,
        # which few servers (serve included) offer, and a plain call keeps them working.
        asks = self._sampling is not None or self._elicits
        as_task = server_runs_tasks(session) and (
            support == "required" or (support == "optional" and not asks)
        )
        with _tracing.mcp_span("tools/call", tool, lambda: self._span_attributes(session)) as live:
            try:
                async with self._call_desk():
                    if as_task:
                        result = await self._task_call(session, tool).run(args, call_meta)
                    else:
                        result = await self._call_tool(
                            session, tool, public_name, args, ctx, call_meta
                        )
            except MCPError as exc:
                _tracing.mcp_failed(live, exc.error.code, exc.error.message)
                reason = self._explain(exc)
                if reason is not None:
                    return ToolResult.error(f"MCP server {self.config.name!r}: {reason}", meta)
                return ToolResult.error(exc.error.message or str(exc), meta)
            output, is_error = result_text(result)
            if is_error:
                _tracing.fail(live, "tool_error")  # the conventions' value for isError
        return ToolResult(output, is_error, meta, parts_of(result.content))

    def _task_call(self, session: ClientSession, tool: str) -> TaskCall:
        assert self._dispatcher is not None  # set with the session
        dispatcher = self._dispatcher

        async def send_raw(method: str, params: dict[str, Any]) -> dict[str, Any]:
            version = session.protocol_version or ""
            opts: Any = {"headers": {MCP_PROTOCOL_VERSION_HEADER: version}}
            return await dispatcher.send_raw_request(method, params, opts)

        resume = current_resume.get()
        return TaskCall(session, send_raw, self.config.name, tool, resume, self.bound)

    def _span_attributes(self, session: ClientSession) -> Mapping[str, Any]:
        """The MCP conventions' session attributes of this connection's client spans."""
        found: dict[str, Any] = {}
        if session.protocol_version:
            found["mcp.protocol.version"] = session.protocol_version
        if self._session_id:
            found["mcp.session.id"] = self._session_id
        if self.config.type == "local":
            found["network.transport"] = "pipe"
            return found
        found["network.transport"] = "tcp"
        found["network.protocol.name"] = "http"
        url = urlsplit(self.config.url or "")
        if url.hostname:
            found["server.address"] = url.hostname
            port = url.port or (443 if url.scheme == "https" else 80)
            found["server.port"] = port
        return found

    def _call_desk(self) -> contextlib.AbstractAsyncContextManager[ActiveCall | None]:
        """The call's place on the desk, when this server may ask us things."""
        if self._sampling is None and not self._elicits:
            return contextlib.nullcontext()
        return self._desk.open_call()

    async def _call_tool(
        self,
        session: ClientSession,
        tool: str,
        public_name: str,
        args: dict[str, Any],
        ctx: ToolContext,
        call_meta: dict[str, Any],
    ) -> types.CallToolResult:
        services = current_run.get()
        if services is None or (services.emit is None and services.metric is None):
            return await session.call_tool(
                tool, args, meta=cast(types.RequestParamsMeta, call_meta) if call_meta else None
            )
        # Our own progress token, routed by the read tap (see ReadTap).
        token = f"tnx-{next(self._tokens)}"
        progress = CallProgress(services, public_name, ctx.call_id, self.config.name)
        self._progress[token] = progress
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(progress.forward)
                try:
                    return await session.call_tool(
                        tool,
                        args,
                        meta=cast(types.RequestParamsMeta, {"progress_token": token, **call_meta}),
                    )
                finally:
                    progress.finish()
        finally:
            del self._progress[token]

    # ------------------------------------------------------------------ server -> client

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._changed.set()
        elif isinstance(message, Exception):
            logger.debug("MCP server %r sent a bad message: %s", self.config.name, message)
        await trio.lowlevel.checkpoint()

    async def _sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        assert self._sampling is not None  # the capability is advertised only with one
        return await self._sampling.answer(self._desk, params)

    async def _elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        raw = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        try:
            request = request_from_elicitation(raw)
        except ValueError as exc:
            return types.ErrorData(code=types.INVALID_PARAMS, message=str(exc))
        if self._elicitations >= MAX_ELICITATIONS:
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"too many elicitations at once (limit {MAX_ELICITATIONS})",
            )
        self._elicitations += 1
        try:
            call = self._desk.pick()
            if isinstance(call, ActiveCall):
                answer: object = await call.run(lambda: self._ask(request, relay=True))
            else:
                answer = await self._ask(request, relay=False)  # none or several calls: ours
        except Refused as exc:
            return types.ErrorData(code=exc.code, message=str(exc))
        except Exception:
            logger.exception(
                "answering an elicitation of %r failed; answering cancel", self.config.name
            )
            return types.ElicitResult(action="cancel")
        finally:
            self._elicitations -= 1
        if not isinstance(answer, Answer):
            logger.error(
                "wait_for returned %s, not an Answer; answering cancel", type(answer).__name__
            )
            return types.ElicitResult(action="cancel")
        try:
            out = elicit_result_from_answer(answer, url_mode=request.kind == "authorization")
        except ValueError as exc:
            return types.ErrorData(code=types.INVALID_PARAMS, message=str(exc))
        return types.ElicitResult.model_validate(out)

    async def _ask(self, request: Request, *, relay: bool) -> object:
        """Relay to the calling client when it elicits (``serve`` says so in the run's
        services), else the toolkit's ``wait_for``; with neither, cancel."""
        services = current_run.get() if relay else None
        if services is not None and services.elicit is not None:
            return await services.elicit(request)
        if self._wait_for is not None:
            return await self._wait_for(request)
        logger.info(
            "MCP server %r elicited with no client to relay to and no wait_for: cancel",
            self.config.name,
        )
        await trio.lowlevel.checkpoint()
        return Answer(request.id, False, reason="cancelled")
