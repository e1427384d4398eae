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
  the connection, parsed by :mod:`._h1`; the body is streamed: the socket is read only
  when the caller asks for the next piece, so a slow reader slows the server.

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
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx2
import trio

from ._h1 import (
    CHUNKED,
    LENGTH,
    Head,
    body_framing,
    chunk_frame,
    find_head_end,
    parse_head,
    serialize_head,
)

_DEFAULT_PORTS = {b"http": 80, b"https": 443}
_POSIX = os.name == "posix"
_READ_SIZE = 65536
MAX_HEAD_BYTES = 64 * 1024
"""A response head (status line and headers) larger than this is refused."""
_MAX_LINE = 4096
"""A chunk-size line (with its extensions) or a trailer line longer than this is refused."""

Key = tuple[bytes, bytes, int]

# Chunked states.
_SIZE, _DATA, _DATA_END, _TRAILER = 0, 1, 2, 3


def _detail(exc: BaseException) -> str:
    """The most useful message of a Trio stream error (often the cause's)."""
    cause = exc.__cause__
    if cause is not None and str(cause):
        return f"{type(cause).__name__}: {cause}"
    return str(exc) or type(exc).__name__


def _timeout(timeouts: Mapping[str, Any], name: str) -> float:
    value = timeouts.get(name)
    return math.inf if value is None else float(value)


class _Conn:
    """One open connection: its stream, the raw socket (closed synchronously), bytes
    read past the last response head, and when it went idle.

    ``fd`` is the socket's descriptor for plain TCP on POSIX, read and written directly
    (see :func:`send`), and -1 for TLS, which goes through the ``SSLStream``.
    """

    __slots__ = ("buffer", "fd", "idle_since", "key", "socket", "stream")

    def __init__(self, stream: trio.abc.Stream, socket: trio.socket.SocketType, key: Key):
        self.stream = stream
        self.socket = socket
        self.key = key
        self.fd = socket.fileno() if _POSIX and type(stream) is trio.SocketStream else -1
        self.buffer = b""
        self.idle_since = 0.0


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
        self._idle: dict[Key, list[_Conn]] = {}
        self._open: set[_Conn] = set()
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
            self._drop(conn)
            raise

    async def aclose(self) -> None:
        """Close every connection (idle or busy); later requests fail."""
        self._closed = True
        for conn in list(self._open):
            self._drop(conn)
        self._idle.clear()
        await trio.lowlevel.checkpoint()

    # -- the pool -----------------------------------------------------------

    def _idle_conn(self, key: Key) -> _Conn | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        oldest_usable = trio.current_time() - self.keepalive_expiry
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be stale
            # Readable while idle: the server closed it (or sent bytes nobody asked for).
            if conn.idle_since < oldest_usable or conn.socket.is_readable():
                self._drop(conn)
                continue
            return conn
        return None

    def _release(self, conn: _Conn) -> None:
        """A response was read to its end: keep *conn* for the next request."""
        if self._closed or self._waiting or conn.buffer:
            self._drop(conn)  # a waiter gets its slot; extra bytes are a broken framing
            return
        conn.idle_since = trio.current_time()
        self._idle.setdefault(conn.key, []).append(conn)

    def _drop(self, conn: _Conn) -> None:
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
            self._drop(min(idle, key=lambda c: c.idle_since))
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

    async def _connect(self, key: Key, timeouts: Mapping[str, Any]) -> _Conn:
        await self._take_slot(timeouts)
        scheme, raw_host, port = key
        host = raw_host.decode("ascii")
        tcp: trio.SocketStream | None = None
        conn: _Conn | None = None
        try:
            with trio.move_on_after(_timeout(timeouts, "connect")):
                tcp = await trio.open_tcp_stream(host, port)
                stream: trio.abc.Stream = tcp
                if scheme == b"https":
                    context = self._ssl_context or await self._default_context()
                    tls = trio.SSLStream(tcp, context, server_hostname=host, https_compatible=True)
                    await tls.do_handshake()
                    stream = tls
                conn = _Conn(stream, tcp.socket, key)
        except BaseException as exc:
            if tcp is not None:
                tcp.socket.close()
            self._slots.release()
            if isinstance(exc, OSError | trio.BrokenResourceError):
                raise httpx2.ConnectError(_detail(exc)) from exc
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
        self, conn: _Conn, body: AsyncIterator[bytes], request: httpx2.Request, per_write: float
    ) -> None:
        chunked = "chunked" in request.headers.get("transfer-encoding", "").lower()
        async for part in body:
            if part:
                await send(conn, chunk_frame(part) if chunked else part, per_write)
        if chunked:
            await send(conn, b"0\r\n\r\n", per_write)

    async def _response(
        self, conn: _Conn, method: str, close: bool, per_read: float
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
                self._release(conn)
            else:
                self._drop(conn)
            return httpx2.Response(
                head.status, headers=head.headers, stream=_Empty(), extensions=extensions
            )
        stream = _Body(self, conn, framing, length, keep_alive, per_read)
        return httpx2.Response(
            head.status, headers=head.headers, stream=stream, extensions=extensions
        )

    async def _read_head(self, conn: _Conn, per_read: float) -> Head:
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
            more = await receive(conn, _READ_SIZE, per_read, wait_first=not data)
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


async def send(conn: _Conn, data: bytes, per_write: float) -> None:
    """Write *data* to *conn*, errors as httpx2's; a write that waits longer than
    *per_write* seconds is a ``WriteTimeout``.

    On a plain TCP connection the first write goes straight to the descriptor: it is a
    cancel point, and not a schedule point (the response wait that follows is one); a
    stream's ``send_all`` would add a trip through the scheduler to every request.
    """
    if conn.fd >= 0 and per_write == math.inf:
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            sent = os.write(conn.fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise httpx2.WriteError(_detail(exc)) from exc
        if sent == len(data):
            return
        data = data[sent:]  # the socket buffer is full: the stream waits for room
    try:
        if per_write == math.inf:
            await conn.stream.send_all(data)
            return
        with trio.move_on_after(per_write):
            await conn.stream.send_all(data)
            return
    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise httpx2.WriteError(_detail(exc)) from exc
    raise httpx2.WriteTimeout("sending the request timed out")


async def receive(conn: _Conn, size: int, per_read: float, *, wait_first: bool = False) -> bytes:
    """Up to *size* bytes from *conn* (``b""`` at EOF), errors as httpx2's; a read
    that waits longer than *per_read* seconds is a ``ReadTimeout``.

    On a plain TCP connection the descriptor is read directly, and with *wait_first*
    (nothing can have arrived yet) only once it is readable, which saves a failed read.
    Either way the call is a checkpoint, as a stream's ``receive_some`` is.
    """
    if conn.fd >= 0 and per_read == math.inf:
        # (conn.fd is read again after every wait: the pool may have closed the socket.)
        try:
            if not wait_first:
                await trio.lowlevel.checkpoint_if_cancelled()
                try:
                    data = os.read(conn.fd, size)
                except BlockingIOError:
                    pass
                else:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                    return data
            while True:
                await trio.lowlevel.wait_readable(conn.socket)
                if conn.fd < 0:
                    raise trio.ClosedResourceError("the connection was closed")
                try:
                    return os.read(conn.fd, size)
                except BlockingIOError:
                    continue  # a spurious wakeup
        except (OSError, trio.ClosedResourceError) as exc:
            raise httpx2.ReadError(_detail(exc)) from exc
    got: bytes | bytearray | None = None
    try:
        if per_read == math.inf:
            got = await conn.stream.receive_some(size)
        else:
            with trio.move_on_after(per_read):
                got = await conn.stream.receive_some(size)
            if got is None:
                raise httpx2.ReadTimeout("reading the response timed out")
    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise httpx2.ReadError(_detail(exc)) from exc
    # (Trio's socket and TLS streams both return bytes; bytearray is allowed by the ABC.)
    return got if type(got) is bytes else bytes(got)


class _Empty(httpx2.AsyncByteStream):
    """A body known to be empty."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        raise StopAsyncIteration


class _Body(httpx2.AsyncByteStream):
    """A response body read from its connection as the caller iterates.

    The piece that completes the body puts the connection back in the pool (or closes
    it); :meth:`aclose` before that, or an error or cancel while reading, closes it.
    """

    __slots__ = (
        "_buf",
        "_conn",
        "_done",
        "_framing",
        "_keep_alive",
        "_left",
        "_per_read",
        "_pos",
        "_received",
        "_state",
        "_trailer",
        "_transport",
    )

    def __init__(
        self,
        transport: Http1Transport,
        conn: _Conn,
        framing: int,
        length: int,
        keep_alive: bool,
        per_read: float,
    ) -> None:
        self._transport = transport
        self._conn = conn
        self._framing = framing
        self._left = length  # Content-Length: bytes to come; chunked: of this chunk
        self._keep_alive = keep_alive
        self._per_read = per_read
        self._done = False
        self._received = 0
        self._state = _SIZE
        self._trailer = 0
        self._buf = conn.buffer
        self._pos = 0
        conn.buffer = b""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        try:
            if self._framing == LENGTH:
                data = await self._next_length()
            elif self._framing == CHUNKED:
                data = await self._next_chunked()
            else:
                data = await self._next_until_close()
        except BaseException:
            self._abandon()
            raise
        if not data:
            raise StopAsyncIteration
        return data

    async def aclose(self) -> None:
        """Close the connection unless the body was read to its end."""
        self._abandon()

    def _abandon(self) -> None:
        if not self._done:
            self._done = True
            self._transport._drop(self._conn)

    def _finish(self, leftover: bool) -> None:
        self._done = True
        if self._keep_alive and not leftover:
            self._transport._release(self._conn)
        else:
            self._transport._drop(self._conn)

    async def _next_length(self) -> bytes:
        data = self._buf
        if data:
            self._buf = b""
        else:
            data = await receive(self._conn, min(self._left, _READ_SIZE), self._per_read)
            if not data:
                raise httpx2.RemoteProtocolError(
                    "the server closed the connection before the end of the body: "
                    f"{self._received} bytes received, {self._received + self._left} announced"
                )
        size = len(data)
        self._received += size
        if size >= self._left:
            leftover = size > self._left
            if leftover:
                data = data[: self._left]
            self._left = 0
            self._finish(leftover)
        else:
            self._left -= size
        return data

    async def _next_until_close(self) -> bytes:
        data = self._buf
        if data:
            self._buf = b""
            return data
        data = await receive(self._conn, _READ_SIZE, self._per_read)
        if not data:
            self._finish(True)
        return data

    async def _next_chunked(self) -> bytes:
        """Every chunk byte already received, joined; reads the socket only when none is."""
        out: list[bytes] = []
        buf, pos, state, left = self._buf, self._pos, self._state, self._left
        try:
            while True:
                end = len(buf)
                if state == _DATA:
                    if pos < end:
                        take = min(end - pos, left)
                        out.append(buf[pos : pos + take])
                        pos += take
                        left -= take
                        if not left:
                            state = _DATA_END
                        continue
                elif state == _SIZE:
                    nl = buf.find(b"\n", pos)
                    if nl >= 0:
                        left = _chunk_size(buf[pos:nl])
                        pos = nl + 1
                        state = _DATA if left else _TRAILER
                        continue
                    if end - pos > _MAX_LINE:
                        raise httpx2.RemoteProtocolError("a chunk-size line is too long")
                elif state == _DATA_END:
                    if buf.startswith(b"\r\n", pos):
                        pos += 2
                        state = _SIZE
                        continue
                    if buf.startswith(b"\n", pos):
                        pos += 1
                        state = _SIZE
                        continue
                    if end - pos >= 2 or (end - pos == 1 and buf[pos] != 13):
                        raise httpx2.RemoteProtocolError("a chunk does not end with CRLF")
                else:  # _TRAILER: header lines after the last chunk, ignored
                    nl = buf.find(b"\n", pos)
                    if nl >= 0:
                        line_end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
                        empty = line_end == pos
                        self._trailer += nl + 1 - pos
                        pos = nl + 1
                        if empty:
                            self._finish(pos < end)
                            break
                        if self._trailer > MAX_HEAD_BYTES:
                            raise httpx2.RemoteProtocolError("the chunked trailer is too long")
                        continue
                    if end - pos > _MAX_LINE:
                        raise httpx2.RemoteProtocolError("a trailer line is too long")
                if out:
                    break  # hand over what arrived before waiting for more
                more = await receive(self._conn, _READ_SIZE, self._per_read)
                if not more:
                    raise httpx2.RemoteProtocolError(
                        "the server closed the connection before the end of the chunked body"
                    )
                buf = buf[pos:] + more if pos < end else more
                pos = 0
        finally:
            self._buf, self._pos, self._state, self._left = buf, pos, state, left
        return b"".join(out) if len(out) != 1 else out[0]


def _chunk_size(line: bytes) -> int:
    size = line.split(b";", 1)[0].strip(b" \t\r")
    if not size or len(size) > 16 or size.strip(b"0123456789abcdefABCDEF"):
        raise httpx2.RemoteProtocolError(f"a bad chunk-size line: {line[:40]!r}")
    return int(size, 16)
