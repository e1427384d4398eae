"""An SSE client for the AG-UI endpoint (h11 over a trio socket), and the validation of
every AG-UI event against the ``ag-ui-protocol`` package's models."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import h11
import trio

try:
    from ag_ui.core import Event as _AguiEvent
    from pydantic import TypeAdapter

    _EVENT = TypeAdapter(_AguiEvent)
except ImportError:  # pragma: no cover - the test extra brings it
    _EVENT = None


def validate(frame: dict[str, Any]) -> None:
    """*frame* is an AG-UI event its Python models accept (camelCase, as on the wire)."""
    assert _EVENT is not None, "pip install ag-ui-protocol (the test extra)"
    parsed = _EVENT.validate_python(frame)
    assert parsed.type.value == frame["type"]


@asynccontextmanager
async def post_sse(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> AsyncIterator[tuple[int, AsyncIterator[dict[str, Any]]]]:
    """POST *body* to *url*; yields the status and the SSE frames (validated) as they come.
    Leaving the block closes the connection (the client disconnects)."""
    parts = urlsplit(url)
    stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 80)
    conn = h11.Connection(h11.CLIENT)
    data = json.dumps(body).encode()
    head = [
        ("host", parts.netloc),
        ("content-type", "application/json"),
        ("content-length", str(len(data))),
        *(headers or {}).items(),
    ]
    await stream.send_all(conn.send(h11.Request(method="POST", target=parts.path, headers=head)))
    await stream.send_all(conn.send(h11.Data(data=data)) + conn.send(h11.EndOfMessage()))

    async def next_event() -> Any:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
                continue
            return event

    response = await next_event()
    assert isinstance(response, h11.Response)

    async def frames() -> AsyncIterator[dict[str, Any]]:
        buffer = b""
        while True:
            event = await next_event()
            if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return
            buffer += bytes(event.data)
            while b"\n\n" in buffer:
                raw, buffer = buffer.split(b"\n\n", 1)
                for line in raw.split(b"\n"):
                    if line.startswith(b"data: "):
                        frame = json.loads(line[6:])
                        validate(frame)
                        yield frame

    gen = frames()
    try:
        yield response.status_code, gen
    finally:
        with trio.CancelScope(shield=True):
            await gen.aclose()
            await stream.aclose()


async def run_to_end(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every frame of one request, to the end of its response."""
    async with post_sse(url, body) as (status, frames):
        assert status == 200
        return [frame async for frame in frames]


def run_input(thread: str, run: str, prompt: str | None = None, **more: Any) -> dict[str, Any]:
    """A RunAgentInput (camelCase)."""
    messages = [] if prompt is None else [{"id": f"u-{run}", "role": "user", "content": prompt}]
    return {
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **more,
    }


async def until(condition: Callable[[], object]) -> None:
    """Poll *condition* (a process, a file: things with no event) until it is true."""
    while True:
        if condition():
            return
        await trio.sleep(0.01)
