"""A lean HTTP/1.1 transport for httpx2, straight on Trio streams.

The model client's own connection pool is ``httpx2.AsyncClient(transport=Http1Transport(...))``:
httpx2 stays the API (requests, responses, content decoding, its exception types) and
this replaces httpcore2 underneath, which costs more CPU per request than the whole
agent loop around it. What it does:

- HTTP/1.1 over TCP (``trio.open_tcp_stream``) or TLS (``trio.SSLStream`` with the
  given context, ALPN ``http/1.1``, SNI and certificate verification).
- A keep-alive pool per ``(scheme, host, port)``, bounded in total (``max_connections``:
  open connections, idle or busy; a request beyond waits for a slot, an idle
  connection of another host being closed first to make one).
- One ``send_all`` per request: the head and a bytes body joined once. Streamed request
  bodies are sent as they come (chunked when the request says so).
- Responses framed by ``Content-Length``, ``Transfer-Encoding: chunked`` or the close of
  the connection, parsed by :mod:`._h1`; the body is streamed (:mod:`._h1io`): the
  socket is read only when the caller asks for the next piece, so a slow reader slows
  the server.

A connection goes back to the pool only when its response was read to its framed end
with keep-alive on both sides and nothing extra after it. Otherwise (a body left
unread, any error, a Trio cancel) its socket is closed at once, synchronously, so the
server sees the close without waiting for a checkpoint. An idle connection that is
readable (the server closed it, or sent bytes nobody asked for) or idle longer than
``keepalive_expiry`` is closed before use and another taken: nothing was written on it.
Once a byte of a request has been written, a failure surfaces as an httpx2 network
error (``WriteError``, ``ReadError``, ``RemoteProtocolError``) and the caller's retry
rules decide; the transport never resends by itself.

Timeouts come from the request's httpx2 ``timeout`` extension: ``connect``, ``pool``
(waiting for a slot), ``read`` (per socket read) and ``write`` (per send); ``None`` is
no limit. The caller's Trio cancel scope bounds everything anyway.

Not supported: proxies, HTTP/2, ``Expect: 100-continue``, protocol upgrades. Whoever
needs them passes their own ``httpx2.AsyncClient`` (``ClientOptions.http_client``),
which keeps httpx2's stock transport.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx2
import trio

from ._h1 import LENGTH, Head, body_framing, chunk_frame, find_head_end, parse_head, serialize_head
from ._h1io import MAX_HEAD_BYTES, READ_SIZE, Body, Conn, EmptyBody, Key, detail, receive, send

_DEFAULT_PORTS = {b"http": 80, b"https": 443}


def _timeout(timeouts: Mapping[str, Any], name: str) -> float:
    value = timeouts.get(name)
    return math.inf if value is None else float(value)


class Http1Transport(httpx2.AsyncBaseTransport):
    """HTTP/1.1 on Trio streams with a bounded keep-alive pool (see the module doc).

    *ssl_context* verifies https servers (its ALPN protocols are set to ``http/1.1``);
    without one, httpx2's default context is made on the first https connection.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 100,
        keepalive_expiry: float = 5.0,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(["http/1.1"])
        self._ssl_context = ssl_context
        self.max_connections = max_connections
        self.keepalive_expiry = keepalive_expiry
        self._slots = trio.Semaphore(max_connections)
        self._waiting = 0
        self._idle: dict[Key, list[Conn]] = {}
        self._open: set[Conn] = set()
        self._closed = False

    @property
    def open_connections(self) -> int:
        """Connections open now, idle or busy."""
        return len(self._open)

    @property
    def idle_connections(self) -> int:
        """Connections open and waiting in the pool."""
        return sum(len(conns) for conns in self._idle.values())

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send *request* on a pooled or new connection; return once the head is read."""
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        scheme = url.raw_scheme
        default_port = _DEFAULT_PORTS.get(scheme)
        if default_port is None:
            raise httpx2.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        key = (scheme, url.raw_host, url.port or default_port)
        timeouts: Mapping[str, Any] = request.extensions.get("timeout") or {}
        stream = request.stream
        if isinstance(stream, httpx2.ByteStream):
            head, close = serialize_head(request, request.read())
            body: AsyncIterator[bytes] | None = None
        else:
            head, close = serialize_head(request, b"")
            body = aiter(stream)  # type: ignore[arg-type]
        conn = self._idle_conn(key) or await self._connect(key, timeouts)
        try:
            write = _timeout(timeouts, "write")
            await send(conn, head, write)
            if body is not None:
                await self._send_body(conn, body, request, write)
            return await self._response(conn, request.method, close, _timeout(timeouts, "read"))
        except BaseException:
            self.drop(conn)
            raise

    async def aclose(self) -> None:
        """Close every connection (idle or busy); later requests fail."""
        self._closed = True
        for conn in list(self._open):
            self.drop(conn)
        self._idle.clear()
        await trio.lowlevel.checkpoint()

    # -- the pool -----------------------------------------------------------

    def _idle_conn(self, key: Key) -> Conn | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        oldest_usable = trio.current_time() - self.keepalive_expiry
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be stale
            # Readable while idle: the server closed it (or sent bytes nobody asked for).
            if conn.idle_since < oldest_usable or conn.socket.is_readable():
                self.drop(conn)
                continue
            return conn
        return None

    def release(self, conn: Conn) -> None:
        """A response was read to its end: keep *conn* for the next request."""
        if self._closed or self._waiting or conn.buffer:
            self.drop(conn)  # a waiter gets its slot; extra bytes are a broken framing
            return
        conn.idle_since = trio.current_time()
        self._idle.setdefault(conn.key, []).append(conn)

    def drop(self, conn: Conn) -> None:
        """Close *conn* now (synchronously: no checkpoint, safe under a cancel)."""
        if conn in self._open:
            self._open.discard(conn)
            idle = self._idle.get(conn.key)
            if idle and conn in idle:
                idle.remove(conn)
            conn.fd = -1  # its number may be reused at once: never touched again
            conn.socket.close()
            self._slots.release()

    async def _take_slot(self, timeouts: Mapping[str, Any]) -> None:
        while True:
            try:
                self._slots.acquire_nowait()
                return
            except trio.WouldBlock:
                pass
            # Full: an idle connection (of another host: ours were tried) makes room.
            idle = [c for conns in self._idle.values() for c in conns]
            if not idle:
                break
            self.drop(min(idle, key=lambda c: c.idle_since))
        self._waiting += 1
        try:
            with trio.move_on_after(_timeout(timeouts, "pool")) as scope:
                await self._slots.acquire()
        finally:
            self._waiting -= 1
        if scope.cancelled_caught:
            raise httpx2.PoolTimeout(f"no connection free among {self.max_connections}")
        if self._closed:  # closed while this request waited
            self._slots.release()
            raise RuntimeError("the transport is closed")

    async def _connect(self, key: Key, timeouts: Mapping[str, Any]) -> Conn:
        await self._take_slot(timeouts)
        scheme, raw_host, port = key
        host = raw_host.decode("ascii")
        tcp: trio.SocketStream | None = None
        conn: Conn | None = None
        try:
            with trio.move_on_after(_timeout(timeouts, "connect")):
                tcp = await trio.open_tcp_stream(host, port)
                stream: trio.abc.Stream = tcp
                if scheme == b"https":
                    context = self._ssl_context or await self._default_context()
                    tls = trio.SSLStream(tcp, context, server_hostname=host, https_compatible=True)
                    await tls.do_handshake()
                    stream = tls
                conn = Conn(stream, tcp.socket, key)
        except BaseException as exc:
            if tcp is not None:
                tcp.socket.close()
            self._slots.release()
            if isinstance(exc, OSError | trio.BrokenResourceError):
                raise httpx2.ConnectError(detail(exc)) from exc
            raise
        if conn is None:
            if tcp is not None:
                tcp.socket.close()
            self._slots.release()
            raise httpx2.ConnectTimeout(f"connecting to {host}:{port} timed out")
        self._open.add(conn)
        return conn

    async def _default_context(self) -> ssl.SSLContext:
        # Loading the CA bundle is blocking file I/O: a worker thread, once.
        context = await trio.to_thread.run_sync(httpx2.create_ssl_context)
        context.set_alpn_protocols(["http/1.1"])
        self._ssl_context = context
        return context

    # -- one exchange -------------------------------------------------------

    async def _send_body(
        self, conn: Conn, body: AsyncIterator[bytes], request: httpx2.Request, per_write: float
    ) -> None:
        chunked = "chunked" in request.headers.get("transfer-encoding", "").lower()
        async for part in body:
            if part:
                await send(conn, chunk_frame(part) if chunked else part, per_write)
        if chunked:
            await send(conn, b"0\r\n\r\n", per_write)

    async def _response(
        self, conn: Conn, method: str, close: bool, per_read: float
    ) -> httpx2.Response:
        while True:
            head = await self._read_head(conn, per_read)
            if head.status >= 200:
                break
            if head.status == 101:
                raise httpx2.RemoteProtocolError("the server switched protocols unasked (101)")
            # 100 Continue, 103 Early Hints...: informational, the answer follows.
        framing, length, keep_alive = body_framing(head, method, close)
        extensions = {"http_version": head.version, "reason_phrase": head.reason}
        if framing == LENGTH and length == 0:
            if keep_alive:
                self.release(conn)
            else:
                self.drop(conn)
            return httpx2.Response(
                head.status, headers=head.headers, stream=EmptyBody(), extensions=extensions
            )
        stream = Body(self, conn, framing, length, keep_alive, per_read)
        return httpx2.Response(
            head.status, headers=head.headers, stream=stream, extensions=extensions
        )

    async def _read_head(self, conn: Conn, per_read: float) -> Head:
        data: bytes | bytearray = conn.buffer
        conn.buffer = b""
        start = 0  # where the blank line can start, given what was searched already
        while True:
            if data[:1] in (b"\r", b"\n"):  # blank lines before the status line: ignored
                data = data.lstrip(b"\r\n")
                start = 0
            if data:
                found = find_head_end(data, start)
                if found is not None:
                    end, after = found
                    conn.buffer = bytes(data[after:])
                    return parse_head(bytes(data[:end]))
                if len(data) > MAX_HEAD_BYTES:
                    raise httpx2.RemoteProtocolError(
                        f"the response head is over {MAX_HEAD_BYTES} bytes"
                    )
                start = len(data) - 3
            # Nothing buffered: the answer is not here yet, so wait before trying a read.
            more = await receive(conn, READ_SIZE, per_read, wait_first=not data)
            if not more:
                if not data:
                    raise httpx2.RemoteProtocolError(
                        "the server disconnected without sending a response"
                    )
                raise httpx2.RemoteProtocolError("the server disconnected mid response head")
            if not data:
                data = more
            elif isinstance(data, bytearray):
                data += more  # (a head in many pieces is gathered in place, not re-copied)
            else:
                data = bytearray(data) + more
