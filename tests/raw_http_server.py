"""A loopback server for the HTTP transport tests that writes exactly the bytes it is told.

Each accepted connection runs the test's handler with a :class:`Peer`: it reads whole
requests (head and ``Content-Length`` or chunked body) and sends raw bytes, optionally
in pieces that each reach the client as a read of its own. The server counts the
connections it accepted and every request it read, and each peer's ``closed`` event is
set when it saw the client hang up. With ``tls=`` (an ``ssl.SSLContext``) it speaks TLS
and records the SNI name and the ALPN protocol it agreed.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import trio
import trio.testing

from toolnexus_trio._groups import collapse_groups


@attrs.define(eq=False)
class Request:
    """One request as read: the head (without its blank line) and the body."""

    head: bytes
    body: bytes

    @property
    def line(self) -> bytes:
        return self.head.split(b"\r\n", 1)[0]

    def header(self, name: bytes) -> bytes | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None


class Gone(Exception):
    """The client hung up."""


@attrs.define(eq=False)
class Peer:
    """The server's side of one connection."""

    stream: trio.abc.Stream
    index: int
    server: RawServer
    buffer: bytes = b""
    requests: list[Request] = attrs.field(factory=list)
    closed: trio.Event = attrs.field(factory=trio.Event)

    async def _more(self) -> None:
        try:
            data = await self.stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            self.closed.set()
            raise Gone
        self.buffer += data

    async def read_request(self) -> Request:
        """The next request (raises :class:`Gone` when the client hangs up first)."""
        while b"\r\n\r\n" not in self.buffer:
            await self._more()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        request = Request(head, b"")
        length = request.header(b"content-length")
        if length is not None:
            while len(self.buffer) < int(length):
                await self._more()
            request.body, self.buffer = self.buffer[: int(length)], self.buffer[int(length) :]
        elif (request.header(b"transfer-encoding") or b"").lower() == b"chunked":
            while b"0\r\n\r\n" not in self.buffer:
                await self._more()
            request.body, _, self.buffer = self.buffer.partition(b"0\r\n\r\n")
            request.body += b"0\r\n\r\n"  # kept framed: the tests compare the wire bytes
        self.requests.append(request)
        self.server.requests.append(request)
        return request

    async def send(self, data: bytes) -> None:
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed.set()
            raise Gone from None

    async def send_pieces(self, data: bytes, size: int) -> None:
        """*data* in pieces of *size* bytes, each sent once the client waits for more,
        so that each one is a read of its own on the client's side."""
        for start in range(0, len(data), size):
            await trio.testing.wait_all_tasks_blocked()
            await self.send(data[start : start + size])

    async def wait_closed(self) -> None:
        """Until the client hangs up (reading and dropping whatever it sends)."""
        try:
            while True:
                await self._more()
        except Gone:
            pass


Handler = Callable[[Peer], Awaitable[None]]


@attrs.define(eq=False)
class RawServer:
    """What the server saw; ``url`` is ``scheme://host:port``."""

    handler: Handler
    tls: ssl.SSLContext | None = None
    host: str = "127.0.0.1"
    port: int = 0
    peers: list[Peer] = attrs.field(factory=list)
    requests: list[Request] = attrs.field(factory=list)
    sni: list[str | None] = attrs.field(factory=list)
    alpn: list[str | None] = attrs.field(factory=list)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    async def _serve(self, stream: trio.SocketStream) -> None:
        conn: trio.abc.Stream = stream
        if self.tls is not None:
            tls = trio.SSLStream(stream, self.tls, server_side=True)
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError:
                await trio.aclose_forcefully(stream)
                return
            self.alpn.append(tls.selected_alpn_protocol())
            conn = tls
        peer = Peer(conn, len(self.peers), self)
        self.peers.append(peer)
        try:
            await self.handler(peer)
        except Gone:
            pass
        finally:
            await trio.aclose_forcefully(conn)


@asynccontextmanager
async def raw_server(
    handler: Handler, *, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1"
) -> AsyncIterator[RawServer]:
    """A :class:`RawServer` serving *handler* on loopback until the block ends."""
    server = RawServer(handler, tls, host)
    if tls is not None:

        def sni(_obj: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
            server.sni.append(name)

        tls.sni_callback = sni  # type: ignore[assignment]
    with collapse_groups():
        async with trio.open_nursery() as nursery:
            serve = functools.partial(trio.serve_tcp, server._serve, 0, host=host)
            listeners = await nursery.start(serve)
            server.port = listeners[0].socket.getsockname()[1]
            try:
                yield server
            finally:
                nursery.cancel_scope.cancel()


def response(body: bytes = b"ok", *headers: bytes, status: bytes = b"200 OK") -> bytes:
    """An HTTP/1.1 answer with a ``Content-Length`` and *headers* (``b"Name: value"``)."""
    lines = [b"HTTP/1.1 " + status, b"Content-Length: %d" % len(body), *headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def answer_each(peer: Peer, reply: bytes = b"") -> None:
    """Answer every request on *peer* with *reply* (default: ``200 ok``)."""
    while True:
        await peer.read_request()
        await peer.send(reply or response())
