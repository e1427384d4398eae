"""A loopback HTTP/1.1 server (h11 on Trio sockets) for the HTTP tool tests.

Each request is handed to a handler that answers with a :class:`Reply`; a reply with
``stall=True`` never answers and waits for the client to hang up, and one with
``chunks`` streams the body in pieces. Every request is kept in ``server.requests``,
and ``seen.closed`` is set when the client hung up before the answer was complete.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import h11
import trio


@attrs.define(eq=False)
class Seen:
    """One request as the server read it (header names lower-case)."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    closed: trio.Event = attrs.field(factory=trio.Event)
    bytes_sent: int = 0

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@attrs.frozen
class Reply:
    """An answer: status, body, headers; or a stall, or a streamed body."""

    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    stall: bool = False
    chunks: int = 0  # when > 0, ``body`` is sent this many times, chunked


Handler = Callable[[Seen], Awaitable[Reply]]


async def echo(seen: Seen) -> Reply:
    """Answer with the request itself, as JSON."""
    payload = {
        "method": seen.method,
        "target": seen.target,
        "headers": seen.headers,
        "body": seen.body.decode("utf-8", "replace"),
    }
    return Reply(200, json.dumps(payload).encode(), "application/json")


@attrs.define(eq=False)
class LoopbackServer:
    handler: Handler
    requests: list[Seen] = attrs.field(factory=list)
    port: int = 0
    arrived: trio.Event = attrs.field(factory=trio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                seen = await self._read(conn, stream)
                if seen is None:
                    return
                reply = await self.handler(seen)
                if not await self._answer(conn, stream, seen, reply):
                    return
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            with trio.move_on_after(1, shield=True):
                await stream.aclose()

    async def _read(self, conn: h11.Connection, stream: trio.SocketStream) -> Seen | None:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data and conn.their_state is h11.IDLE:
                    return None
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                return None
        assert request is not None
        headers = {k.decode().lower(): v.decode("latin-1") for k, v in request.headers}
        seen = Seen(request.method.decode(), request.target.decode("latin-1"), headers, bytes(body))
        self.requests.append(seen)
        self.arrived.set()
        return seen

    async def _answer(
        self, conn: h11.Connection, stream: trio.SocketStream, seen: Seen, reply: Reply
    ) -> bool:
        if reply.stall:
            try:
                while await stream.receive_some(65536):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            seen.closed.set()
            return False
        headers = [("content-type", reply.content_type), *reply.headers]
        if not reply.chunks:
            headers.append(("content-length", str(len(reply.body))))
        try:
            await stream.send_all(
                conn.send(h11.Response(status_code=reply.status, headers=headers))
            )
            for _ in range(max(reply.chunks, 1)):
                await stream.send_all(conn.send(h11.Data(data=reply.body)))
                seen.bytes_sent += len(reply.body)
            await stream.send_all(conn.send(h11.EndOfMessage()))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            seen.closed.set()
            raise
        return True


@asynccontextmanager
async def open_server(handler: Handler = echo) -> AsyncIterator[LoopbackServer]:
    """``async with open_server(handler) as server:`` a server on 127.0.0.1."""
    server = LoopbackServer(handler)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, server.connection, 0)
        server.port = listeners[0].socket.getsockname()[1]
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


def by_path(routes: dict[str, Reply], default: Handler = echo) -> Handler:
    """A handler answering each path (query ignored) from *routes*, else *default*."""

    async def handle(seen: Seen) -> Reply:
        reply = routes.get(seen.target.split("?", 1)[0])
        return reply if reply is not None else await default(seen)

    return handle
