"""The HTTP side of the MCP source: clients whose answers are held to the message cap.

The SDK reads a streamable-HTTP JSON answer whole, so without a cap the server decides
our memory: every answer but an SSE stream is counted as it streams
(:class:`CappedBody`, installed by a response hook so it applies on every transport
the client picks, proxies included), and only identity encoding is asked for.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import httpx2
import trio

from ._config import McpServerConfig
from ._limits import MAX_MESSAGE_BYTES, size_text

_ssl_context: ssl.SSLContext | None = None


async def ssl_context() -> ssl.SSLContext:
    """The TLS context of MCP's HTTP clients, made once per process."""
    global _ssl_context
    if _ssl_context is None:
        # Loading the CA bundle blocks for tens of ms: once per process, in a thread.
        _ssl_context = await trio.to_thread.run_sync(httpx2.create_ssl_context)
    return _ssl_context


ANSWER_TOO_LARGE: Final = "the server's answer is over the message size limit of"
"""How a capped HTTP answer is named (the start of its error, found again in the SDK's)."""


class AnswerTooLarge(httpx2.StreamError):
    """An HTTP answer (not an SSE stream) over :data:`MAX_MESSAGE_BYTES`, or encoded
    although we asked for none. A :class:`httpx2.StreamError`, so the SDK turns it into
    that request's error instead of failing its whole transport."""


class CappedBody(httpx2.AsyncByteStream):
    """A response body held to :data:`MAX_MESSAGE_BYTES` as it streams: the SDK reads a
    JSON answer whole (``aread``), so without this a server decides our memory. The
    checks run as the body is read, where the SDK turns them into the request's error
    (raised from the response hook they would end the SDK's whole transport)."""

    def __init__(self, inner: httpx2.AsyncByteStream, declared: int | None, coding: str) -> None:
        self._inner = inner
        self._declared = declared
        self._coding = coding

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._coding != "identity":
            # We ask for identity (see new_http_client): an encoded answer could inflate
            # past any cap before one byte of it was counted.
            raise AnswerTooLarge(
                f"the server sent Content-Encoding {self._coding!r:.40}, which was not asked for"
            )
        over = AnswerTooLarge(f"{ANSWER_TOO_LARGE} {size_text(MAX_MESSAGE_BYTES)}")
        if self._declared is not None and self._declared > MAX_MESSAGE_BYTES:
            raise over  # said so up front: not a byte of it is read
        total = 0
        chunks = aiter(self._inner)
        try:
            async for chunk in chunks:
                total += len(chunk)
                if total > MAX_MESSAGE_BYTES:
                    raise over
                yield chunk
        finally:
            # httpx2's streams are async generators: close the one we stopped early.
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _cap_answer(response: httpx2.Response) -> None:
    """Hold every answer but an SSE stream to the message cap (an event hook, so it
    applies on every transport the client picks, proxies included). An SSE stream is
    many messages; the SDK bounds each of its events (``max_sse_event_size``)."""
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "text/event-stream":
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        declared = response.headers.get("content-length", "")
        size = int(declared) if declared.isdigit() else None
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = CappedBody(response.stream, size, coding)
    await trio.lowlevel.checkpoint()


def new_http_client(
    config: McpServerConfig,
    verify: ssl.SSLContext,
    timeout: httpx2.Timeout,
    event_hooks: dict[str, list[Callable[[httpx2.Response], Awaitable[None]]]] | None = None,
) -> httpx2.AsyncClient:
    """An httpx2 client for one MCP server: its headers, answers held to the cap,
    identity encoding only."""
    hooks = dict(event_hooks or {})
    hooks["response"] = [*hooks.get("response", []), _cap_answer]
    headers = httpx2.Headers(config.expanded_headers())
    # Identity only (whatever the config says): a compressed answer could not be held
    # to the cap as it arrives.
    headers["accept-encoding"] = "identity"
    return httpx2.AsyncClient(headers=headers, timeout=timeout, verify=verify, event_hooks=hooks)
