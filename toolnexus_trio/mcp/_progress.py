"""Progress of MCP tool calls: routed off the SDK's receive loop, forwarded in order.

The SDK's tasks never await user code: a tap on the receive stream (:class:`ReadTap`)
queues each progress notification for the call it belongs to, and the calling task
forwards them (:class:`CallProgress`) to the running loop's stream events. A tap on
the write stream (:class:`WriteTap`) shows the tracing each request's JSON-RPC id.
"""

from __future__ import annotations

import collections
import contextlib
import math
from typing import Any, Final

import anyio
import mcp_types as types
import trio

from .._runctx import RunServices
from .._tracing import mcp_request_sent

MAX_PROGRESS_BACKLOG: Final = 64
"""Progress updates of one call held for forwarding; past it the oldest are dropped."""


class CallProgress:
    """Progress of one call, in wire order: the read tap queues, the calling task forwards."""

    def __init__(self, services: RunServices, tool: str, call_id: str | None, server: str):
        self.services, self.tool, self.call_id, self.server = services, tool, call_id, server
        self.queue: collections.deque[tuple[float, float | None, str | None]] = collections.deque(
            maxlen=MAX_PROGRESS_BACKLOG
        )
        self.wake = trio.Event()
        self.done = False

    def push(self, params: dict[str, Any]) -> None:
        """Queue one ``notifications/progress`` (called by the read tap: never blocks)."""
        progress, total, message = (
            params.get("progress"),
            params.get("total"),
            params.get("message"),
        )
        if not isinstance(progress, int | float) or isinstance(progress, bool):
            return
        if not isinstance(total, int | float) or isinstance(total, bool):
            total = None
        self.queue.append((float(progress), total, message if isinstance(message, str) else None))
        self.wake.set()

    async def forward(self) -> None:
        while True:
            while not self.queue:
                if self.done:
                    return
                await self.wake.wait()
                self.wake = trio.Event()
            progress, total, message = self.queue.popleft()
            percent = None
            if total and math.isfinite(total) and total > 0 and math.isfinite(progress):
                percent = max(0, min(100, round(progress * 100 / total)))
            if self.services.metric is not None:
                self.services.metric(
                    {"event": "progress", "tool": self.tool, "percent": percent, "message": message}
                )
            if self.services.emit is not None:
                event = {
                    "type": "progress",
                    "id": self.call_id,
                    "tool": self.tool,
                    "server": self.server,
                    "progress": progress,
                    "total": total,
                    "percent": percent,
                    "message": message,
                }
                # A consumer that is gone means the run is ending: drop the event.
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await self.services.emit(event)

    def finish(self) -> None:
        self.done = True
        self.wake.set()


class ReadTap:
    """The session's read stream, seen first by us: ``notifications/progress`` for one
    of our calls is routed to that call's queue here, in the receive loop and in wire
    order (so all of a call's progress is queued before its answer is delivered),
    and is not passed on. Everything else passes through untouched."""

    def __init__(self, inner: Any, routes: dict[str, CallProgress]) -> None:
        self._inner = inner
        self._routes = routes

    @property
    def last_context(self) -> Any:
        """The SDK's per-message context, when the inner stream carries one."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            message = getattr(item, "message", None)
            if (
                isinstance(message, types.JSONRPCNotification)
                and message.method == "notifications/progress"
                and isinstance(message.params, dict)
            ):
                route = self._routes.get(str(message.params.get("progressToken")))
                if route is not None:
                    route.push(message.params)
                    continue
            return item

    def __aiter__(self) -> ReadTap:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> ReadTap:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class WriteTap:
    """The session's write stream, seen first by us: each request written is told to
    the tracing (:func:`~toolnexus_trio._tracing.mcp_request_sent`), which puts its
    JSON-RPC id on the MCP CLIENT span of the task sending it (the SDK writes in the
    calling task, and this is the public seam where the id shows). Everything passes on."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def send(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if isinstance(message, types.JSONRPCRequest):
            mcp_request_sent(message.method, message.id)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> WriteTap:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
