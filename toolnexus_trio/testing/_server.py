"""The loopback HTTP/1.1 server of :class:`FakeProvider`, on ``h11`` and Trio sockets.

One task per connection (keep-alive honoured), each reading its requests and writing
its answers itself: there is no queue, so a client that reads slowly makes the
server's ``send_all`` wait, which is what the backpressure tests watch.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import h11
import trio

from .._groups import collapse_groups
from ._script import Step, WireStyle, json_body, sse_events
from ._wires import gemini_body, gemini_events, responses_body, responses_events

MAX_REQUEST_BYTES = 16 * 1024 * 1024
_SERVER = b"toolnexus-trio-fake-provider"


@attrs.define(eq=False)
class ReceivedRequest:
    """One request the provider read, and what became of its answer.

    ``headers`` has lower-case names; ``json`` is the decoded body (``None`` when it
    is not JSON); ``received_at`` is ``trio.current_time()`` when it was read.
    ``step`` is the scripted step that answered it (``None`` when the script had run
    out or the path was unknown). ``events_sent`` counts the SSE
    events written so far; ``closed`` is set (and ``closed_at`` stamped with
    ``trio.current_time()``) when the provider saw the client hang up on this request
    before the answer was complete.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    received_at: float = attrs.field(factory=trio.current_time)
    step: Step | None = None
    events_sent: int = 0
    closed: trio.Event = attrs.field(factory=trio.Event)
    closed_at: float | None = None

    def mark_closed(self) -> None:
        """Record that the client went away mid-answer."""
        if not self.closed.is_set():
            self.closed_at = trio.current_time()
            self.closed.set()


class _Gone(Exception):
    """The client closed the connection."""


class FakeProvider:
    """A scripted model server speaking four model wires on loopback.

    ``POST .../chat/completions`` answers in the OpenAI style, ``POST .../messages``
    in the Anthropic style, ``POST .../responses`` as the OpenAI Responses API; a
    body with ``"stream": true`` gets SSE, otherwise JSON. ``POST
    .../models/{model}:generateContent`` answers as Gemini, and
    ``:streamGenerateContent?alt=sse`` with Gemini's SSE chunks.
    Each request takes the next :class:`Step` of the script (with ``cycle=True`` the
    script repeats); when it has run out the answer is a 500. Every request is kept in
    :attr:`requests`. Start it with :func:`open_fake_provider`, or run :meth:`serve`
    in your own nursery (``await nursery.start(provider.serve)``).

    ``POST .../systemone`` is a judgment backend (SPEC §8B): a step answers it with
    its ``body`` (or, without one, its ``text``) as the JSON body, after the same
    faults (``status``, ``delay_ms``, ``stall``...) as any other wire.
    """

    def __init__(self, script: Iterable[Step | Mapping[str, Any]] = (), *, cycle: bool = False):
        self.script: list[Step] = []
        self.cycle = cycle
        self.requests: list[ReceivedRequest] = []
        self.port = 0
        self._arrived = trio.Condition()
        self.add(*script)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (set once serving)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """``<url>/v1``: the ``base_url`` for either style."""
        return self.url + "/v1"

    def add(self, *steps: Step | Mapping[str, Any]) -> None:
        """Append steps (a :class:`Step` or its JSON form) to the script."""
        self.script.extend(s if isinstance(s, Step) else Step.from_json(s) for s in steps)

    async def wait_request(self, index: int) -> ReceivedRequest:
        """Wait until request number *index* (0-based) has been read; return it."""
        async with self._arrived:
            while len(self.requests) <= index:
                await self._arrived.wait()
        return self.requests[index]

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[FakeProvider] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on *host*:*port* (0: any free port) until cancelled.

        ``task_status.started`` gets the provider once :attr:`port` is known.
        """
        async with trio.open_nursery() as nursery:
            serve_tcp = functools.partial(trio.serve_tcp, self._connection, port, host=host)
            listeners = await nursery.start(serve_tcp)
            self.port = listeners[0].socket.getsockname()[1]
            task_status.started(self)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        try:
            while True:
                received = await self._read(conn, stream)
                if received is None:
                    return
                if not await self._answer(conn, stream, received):
                    return
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (_Gone, h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            with trio.move_on_after(1, shield=True):
                await stream.aclose()

    async def _read(
        self, conn: h11.Connection, stream: trio.SocketStream
    ) -> ReceivedRequest | None:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data and request is None and conn.their_state is h11.IDLE:
                    return None
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_REQUEST_BYTES:
                    raise _Gone  # a hostile client: drop it rather than buffer more
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                return None
        assert request is not None
        headers: dict[str, str] = {}
        for name, value in request.headers:
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        try:
            decoded = json.loads(body)
        except ValueError:
            decoded = None
        received = ReceivedRequest(
            request.method.decode(), request.target.decode("latin-1"), headers, bytes(body), decoded
        )
        async with self._arrived:
            self.requests.append(received)
            self._arrived.notify_all()
        return received

    def _next_step(self) -> Step | None:
        if not self.script:
            return None
        step = self.script.pop(0)
        if self.cycle:
            self.script.append(step)
        return step

    async def _answer(
        self, conn: h11.Connection, stream: trio.SocketStream, received: ReceivedRequest
    ) -> bool:
        path = received.path.split("?", 1)[0].rstrip("/")
        style, gemini_model, gemini_stream = _style_of(path, received.path)
        if style is None or received.method != "POST":
            await _send_simple(conn, stream, 404, _error("no such endpoint"))
            return True
        step = received.step = self._next_step()
        if step is None:
            await _send_simple(conn, stream, 500, _error("FakeProvider: the script has run out"))
            return True
        if step.delay_ms and not await _wait_or_gone(conn, stream, received, step.delay_ms):
            return False
        if step.stall:
            await _wait_gone(stream, received)
            return False
        extra = [(b"retry-after", step.retry_after.encode())] if step.retry_after else []
        if step.status != 200:
            body = (
                step.body.encode() if step.body is not None else _error(f"scripted {step.status}")
            )
            await _send_simple(conn, stream, step.status, body, extra)
            return True
        request = received.json if isinstance(received.json, dict) else {}
        if step.body is not None:
            streamed = request.get("stream") is True or gemini_stream
            kind = step.content_type or ("text/event-stream" if streamed else "application/json")
            await _send_simple(conn, stream, 200, step.body.encode(), extra, kind)
            return True
        if style == "systemone":
            await _send_simple(conn, stream, 200, step.text.encode(), extra)
            return True
        model = gemini_model or str(request.get("model", "fake"))
        serial = len(self.requests)
        if style == "gemini" and gemini_stream:
            return await _send_events(
                conn, stream, received, step, gemini_events(step, model, serial)
            )
        if request.get("stream") is True and style != "gemini":
            if style == "responses":
                events = responses_events(step, model, serial)
            else:
                options = request.get("stream_options")
                include_usage = isinstance(options, dict) and options.get("include_usage") is True
                events = sse_events(style, step, model, serial, include_usage=include_usage)
            return await _send_events(conn, stream, received, step, events)
        if style == "responses":
            answer = responses_body(step, model, serial)
        elif style == "gemini":
            answer = gemini_body(step, model, serial)
        else:
            answer = json_body(style, step, model, serial)
        body = json.dumps(answer).encode()
        if step.drop_after is not None:
            await _send_head(conn, stream, 200, "application/json", len(body))
            await stream.send_all(conn.send(h11.Data(data=body[: len(body) // 2])))
            return False
        await _send_simple(conn, stream, 200, body)
        return True


def _style_of(path: str, target: str) -> tuple[WireStyle | Literal["systemone"] | None, str, bool]:
    """The wire a request path asks for; for Gemini also its model and whether it streams."""
    if path.endswith("/systemone"):
        return "systemone", "", False
    if path.endswith("/chat/completions"):
        return "openai", "", False
    if path.endswith("/messages"):
        return "anthropic", "", False
    if path.endswith("/responses"):
        return "responses", "", False
    head, _, method = path.rpartition(":")
    if "/models/" in head and method in ("generateContent", "streamGenerateContent"):
        model = head.rsplit("/models/", 1)[1]
        streamed = method == "streamGenerateContent" and "alt=sse" in target.partition("?")[2]
        return "gemini", model, streamed
    return None, "", False


def _error(message: str) -> bytes:
    return json.dumps({"error": {"type": "fake_provider", "message": message}}).encode()


def _head(
    conn: h11.Connection,
    status: int,
    content_type: str,
    length: int | None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> bytes:
    headers = [(b"content-type", content_type.encode()), (b"server", _SERVER)]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    headers += extra or []
    return conn.send(h11.Response(status_code=status, headers=headers)) or b""


async def _send_head(
    conn: h11.Connection,
    stream: trio.SocketStream,
    status: int,
    content_type: str,
    length: int | None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await stream.send_all(_head(conn, status, content_type, length, extra))


async def _send_simple(
    conn: h11.Connection,
    stream: trio.SocketStream,
    status: int,
    body: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
    content_type: str = "application/json",
) -> None:
    # One write for head and body, as servers do for a small answer (one wake-up for
    # the client instead of two).
    head = _head(conn, status, content_type, len(body), extra)
    await stream.send_all(
        head + (conn.send(h11.Data(data=body)) or b"") + (conn.send(h11.EndOfMessage()) or b"")
    )


async def _send_events(
    conn: h11.Connection,
    stream: trio.SocketStream,
    received: ReceivedRequest,
    step: Step,
    events: list[bytes],
) -> bool:
    try:
        await _send_head(conn, stream, 200, "text/event-stream", None)
        for event in events:
            if received.events_sent == step.drop_after:
                return False  # cut off: the chunked body never ends
            if received.events_sent == step.stall_after:
                await _wait_gone(stream, received)
                return False
            if step.event_delay_ms and received.events_sent:
                await trio.sleep(step.event_delay_ms / 1000)
            await stream.send_all(conn.send(h11.Data(data=event)))
            received.events_sent += 1
        if step.hold_open:
            await _wait_gone(stream, received)
            return False
        await stream.send_all(conn.send(h11.EndOfMessage()))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        received.mark_closed()
        raise _Gone from None
    return True


async def _wait_or_gone(
    conn: h11.Connection, stream: trio.SocketStream, received: ReceivedRequest, ms: int
) -> bool:
    """Wait *ms* before answering, watching the socket: ``False`` (and the request marked
    closed) when the client hangs up meanwhile, as a hedged request's loser does."""
    with trio.move_on_after(ms / 1000):
        try:
            while data := await stream.receive_some(65536):
                conn.receive_data(data)  # (a next request, kept for its turn)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        received.mark_closed()
        return False
    return True


async def _wait_gone(stream: trio.SocketStream, received: ReceivedRequest) -> None:
    """Hold the connection open until the client hangs up; stamp when it did."""
    try:
        while await stream.receive_some(65536):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    received.mark_closed()


@asynccontextmanager
async def open_fake_provider(
    script: Iterable[Step | Mapping[str, Any]] = (),
    *,
    cycle: bool = False,
    host: str = "127.0.0.1",
    port: int = 0,
) -> AsyncIterator[FakeProvider]:
    """``async with open_fake_provider(script) as provider:`` a serving :class:`FakeProvider`.

    Point a client at ``provider.base_url``. The server stops when the block ends.
    """
    provider = FakeProvider(script, cycle=cycle)
    with collapse_groups():
        async with trio.open_nursery() as nursery:
            await nursery.start(provider.serve, host, port)
            try:
                yield provider
            finally:
                nursery.cancel_scope.cancel()
