"""A server's requests to us during a tool call: sampling and elicitation, routed.

MCP does not say which of our calls a server-to-client request belongs to, and the
SDK answers it in its own task (not the calling one). So each call in flight registers
an :class:`ActiveCall` on its connection's :class:`Desk`: a small task in the call's
own nursery that runs the requests handed to it. They then run in the call's context
(its :class:`~toolnexus_trio._runctx.RunServices`, so ``serve`` can relay them to its
client, and its sampling depth) and under the call's cancel scope: cancelling the call
cancels the model request, and a request still running when the call ends is
answered with an error.

Routing: with one call of that server in flight, the request is that call's. With
several, it is theirs only when they all run for the same client (the same
``RunServices``); otherwise it cannot be told apart and is answered by the toolkit's
own sampler / ``wait_for``, never relayed to a client that might not be the one
whose call caused it. A sampling request with no call in flight is refused (the call
it belongs to has ended).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, TypeVar

import mcp_types as types
import trio

from .._groups import collapse_groups
from .._runctx import RunServices, current_run
from .._sampling import (
    DEPTH_META,
    Sampler,
    SamplingLimits,
    SamplingMessage,
    SamplingRequest,
    SamplingResult,
    depth_from_meta,
    sampling_depth,
)

logger = logging.getLogger("toolnexus_trio.mcp")

T = TypeVar("T")

RATE_WINDOW: Final = 60.0
"""Seconds of the per-server sampling rate window."""
DEFAULT_MODEL: Final = "toolnexus-trio"
"""The ``model`` of a sampling answer when the sampler does not say."""


class Refused(Exception):
    """A server's request we will not serve; the message says why (sent back to it)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Job:
    def __init__(self, fn: Callable[[], Awaitable[Any]]) -> None:
        self.fn = fn
        self.done = trio.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    async def run(self) -> None:
        try:
            self.value = await self.fn()
        except trio.Cancelled:
            self.error = Refused(types.INTERNAL_ERROR, "the tool call was cancelled")
            raise
        except Exception as exc:
            self.error = exc
        finally:
            self.done.set()


class ActiveCall:
    """One tool call in flight: runs the requests routed to it, in its context."""

    def __init__(self) -> None:
        # Unbuffered: the server's request waits until the call's runner takes it.
        self._send, self._recv = trio.open_memory_channel[_Job](0)
        self.services = current_run.get()
        self.depth = sampling_depth.get()

    async def runner(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Closing the receiving end when the call ends refuses later requests at once.
        with self._recv:
            async with trio.open_nursery() as nursery:
                task_status.started()
                async for job in self._recv:
                    nursery.start_soon(job.run)  # in the call's context (copied from this task)

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run *fn* in the call's context and cancel scope; its result or error."""
        job = _Job(fn)
        try:
            await self._send.send(job)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise Refused(
                types.INVALID_REQUEST, "the tool call this request belongs to has ended"
            ) from None
        await job.done.wait()
        if job.error is not None:
            raise job.error
        return job.value  # type: ignore[no-any-return]


AMBIGUOUS: Final = object()


class Desk:
    """A connection's calls in flight, and the routing of its server's requests."""

    def __init__(self) -> None:
        self.calls: list[ActiveCall] = []

    @contextlib.asynccontextmanager
    async def open_call(self) -> AsyncIterator[ActiveCall]:
        """Register a call for the block; requests routed to it run in its nursery."""
        call = ActiveCall()
        # The nursery is hidden: the call's own error (an MCPError) must reach it bare.
        with collapse_groups():
            async with trio.open_nursery() as nursery:
                await nursery.start(call.runner)
                self.calls.append(call)
                try:
                    yield call
                finally:
                    self.calls.remove(call)
                    nursery.cancel_scope.cancel()

    def pick(self) -> ActiveCall | object | None:
        """The call a request belongs to; ``None`` with none in flight, else
        :data:`AMBIGUOUS` when calls for different clients are."""
        calls = self.calls
        if not calls:
            return None
        first = calls[0]
        if all(c.services is first.services for c in calls):
            return calls[-1]
        return AMBIGUOUS


class RateLimit:
    """At most *per_minute* events in any :data:`RATE_WINDOW` seconds."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._times: deque[float] = deque()

    def take(self) -> bool:
        now = trio.current_time()
        times = self._times
        while times and times[0] <= now - RATE_WINDOW:
            times.popleft()
        if len(times) >= self.per_minute:
            return False
        times.append(now)
        return True


# ---------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------


def sampling_request(
    params: types.CreateMessageRequestParams, server: str, limits: SamplingLimits, depth: int
) -> SamplingRequest:
    """The :class:`SamplingRequest` for a server's params (text only; ``maxTokens`` capped).

    Raises :class:`Refused` for content we cannot put to a text model (images, audio,
    tool use) or a request for tools."""
    if params.tools or params.tool_choice is not None:
        raise Refused(types.INVALID_PARAMS, "sampling with tools is not supported")
    messages: list[SamplingMessage] = []
    for message in params.messages:
        parts: list[str] = []
        for block in message.content_as_list:
            if not isinstance(block, types.TextContent):
                raise Refused(
                    types.INVALID_PARAMS,
                    f"sampling supports text content only, not {getattr(block, 'type', '?')}",
                )
            parts.append(block.text)
        messages.append(SamplingMessage(message.role, "\n".join(parts)))
    if params.max_tokens < 1:
        raise Refused(types.INVALID_PARAMS, "maxTokens must be at least 1")
    max_tokens = min(params.max_tokens, limits.max_tokens)
    prefs = params.model_preferences
    hints = tuple(h.name for h in (prefs.hints or ()) if h.name) if prefs is not None else ()
    raw = params.model_dump(by_alias=True, mode="json", exclude_none=True)
    raw["maxTokens"] = max_tokens
    raw["_meta"] = {**(raw.get("_meta") or {}), DEPTH_META: depth}
    temperature = params.temperature
    return SamplingRequest(
        messages=tuple(messages),
        max_tokens=max_tokens,
        system_prompt=params.system_prompt,
        temperature=temperature if temperature is None or math.isfinite(temperature) else None,
        stop_sequences=tuple(params.stop_sequences or ()),
        model_hints=hints,
        model_preferences=None
        if prefs is None
        else prefs.model_dump(by_alias=True, mode="json", exclude_none=True),
        server=server,
        depth=depth,
        params=raw,
    )


class Sampling:
    """One server's sampling: bounds, the sampler or the relay, the event and metric."""

    def __init__(self, server: str, sampler: Sampler | None, limits: SamplingLimits) -> None:
        self.server = server
        self.sampler = sampler
        self.limits = limits
        self.rate = RateLimit(limits.per_minute)

    async def answer(
        self, desk: Desk, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        """The answer to one ``sampling/createMessage`` (an error says why it was refused)."""
        try:
            call = desk.pick()
            if call is None:
                raise Refused(
                    types.INVALID_REQUEST,
                    "sampling refused: no tool call of this server is in flight "
                    "(a request must come while the call it belongs to runs)",
                )
            if not self.rate.take():
                raise Refused(
                    types.INVALID_REQUEST,
                    f"sampling refused: more than {self.limits.per_minute} requests a minute "
                    f"from {self.server!r}",
                )
            if isinstance(call, ActiveCall):
                depth = max(call.depth + 1, depth_from_meta(params.meta))
                request = self._request(params, depth)
                result = await call.run(lambda: self._sample(request))
            else:
                # Several calls for different clients: answered here, never relayed.
                request = self._request(params, max(1, depth_from_meta(params.meta)))
                result = await self._sample(request, relay=False)
        except Refused as exc:
            logger.info("MCP server %r: %s", self.server, exc)
            return types.ErrorData(code=exc.code, message=str(exc))
        except Exception as exc:
            logger.warning("MCP server %r: sampling failed: %s", self.server, exc)
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"sampling failed: {exc}")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=result.text),
            model=result.model or DEFAULT_MODEL,
            stop_reason=result.stop_reason or "endTurn",
        )

    def _request(self, params: types.CreateMessageRequestParams, depth: int) -> SamplingRequest:
        if depth > self.limits.max_depth:
            raise Refused(
                types.INVALID_REQUEST,
                f"sampling refused: depth {depth} exceeds the limit of {self.limits.max_depth}",
            )
        return sampling_request(params, self.server, self.limits, depth)

    async def _sample(self, request: SamplingRequest, *, relay: bool = True) -> SamplingResult:
        """Relay to the caller's client when it samples, else the toolkit's sampler;
        runs with the request's depth set, then reports the ``sample`` event."""
        services = current_run.get()
        token = sampling_depth.set(request.depth)
        try:
            if relay and services is not None and services.relay_sample is not None:
                result = await services.relay_sample(request)
            elif self.sampler is not None:
                result = _as_result(await self.sampler(request))
            else:
                raise Refused(
                    types.INVALID_REQUEST,
                    "sampling refused: neither the calling client nor the toolkit samples",
                )
        except trio.Cancelled:
            _count(services, self.server, request, None, "cancelled")
            raise
        except Exception:
            _count(services, self.server, request, None, "error")
            await _emit(services, self.server, None, "error")
            raise
        finally:
            sampling_depth.reset(token)
        _count(services, self.server, request, result, "ok")
        await _emit(services, self.server, result, "ok")
        return result


def _as_result(value: object) -> SamplingResult:
    if isinstance(value, SamplingResult):
        return value
    if isinstance(value, str):
        return SamplingResult(value)
    raise TypeError(f"the sampler returned {type(value).__name__}, not str or SamplingResult")


def _count(
    services: RunServices | None,
    server: str,
    request: SamplingRequest,
    result: SamplingResult | None,
    status: str,
) -> None:
    """The ``sample`` metric event (``on_metric``, and the run's ``metrics()``)."""
    sink = None if services is None else services.metric or services.observe
    if sink is None:
        return
    event: dict[str, Any] = {
        "event": "sample",
        "server": server,
        "status": status,
        "depth": request.depth,
        "max_tokens": request.max_tokens,
        "tokens": None if result is None else result.tokens,
    }
    try:
        sink(event)
    except Exception:
        logger.exception("the sample metric failed; the request is not affected")


async def _emit(
    services: RunServices | None, server: str, result: SamplingResult | None, status: str
) -> None:
    """The ``sample`` stream event of a run that streams."""
    if services is None or services.emit is None:
        return
    event = {
        "type": "sample",
        "server": server,
        "status": status,
        "tokens": None if result is None else result.tokens,
    }
    # A consumer that is gone means the run is ending: drop the event.
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await services.emit(event)
