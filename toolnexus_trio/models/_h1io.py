"""The connection I/O of :mod:`._transport`: one connection, its reads and writes, and
a response body streamed off it.

A :class:`Body` reads its connection only as the caller iterates, so a slow reader
slows the server; the piece that completes the body hands the connection back to its
pool, and leaving early, an error or a cancel closes it (see :mod:`._transport`).
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator
from typing import Protocol

import httpx2
import trio

from ._h1 import CHUNKED, LENGTH

_POSIX = os.name == "posix"
READ_SIZE = 65536
MAX_HEAD_BYTES = 64 * 1024
"""A response head (status line and headers), or a chunked trailer, larger than this is
refused."""
_MAX_LINE = 4096
"""A chunk-size line (with its extensions) or a trailer line longer than this is refused."""

Key = tuple[bytes, bytes, int]
"""A pool key: scheme, host, port."""

# Chunked states.
_SIZE, _DATA, _DATA_END, _TRAILER = 0, 1, 2, 3


def detail(exc: BaseException) -> str:
    """The most useful message of a Trio stream error (often the cause's)."""
    cause = exc.__cause__
    if cause is not None and str(cause):
        return f"{type(cause).__name__}: {cause}"
    return str(exc) or type(exc).__name__


class Conn:
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


class Pool(Protocol):
    """What a :class:`Body` needs of its pool."""

    def release(self, conn: Conn) -> None:
        """The answer on *conn* was read to its end: keep it for another request."""

    def drop(self, conn: Conn) -> None:
        """Close *conn* now."""


async def send(conn: Conn, data: bytes, per_write: float) -> None:
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
            raise httpx2.WriteError(detail(exc)) from exc
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
        raise httpx2.WriteError(detail(exc)) from exc
    raise httpx2.WriteTimeout("sending the request timed out")


async def receive(conn: Conn, size: int, per_read: float, *, wait_first: bool = False) -> bytes:
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
            raise httpx2.ReadError(detail(exc)) from exc
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
        raise httpx2.ReadError(detail(exc)) from exc
    # (Trio's socket and TLS streams both return bytes; bytearray is allowed by the ABC.)
    return got if type(got) is bytes else bytes(got)


class EmptyBody(httpx2.AsyncByteStream):
    """A body known to be empty."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        raise StopAsyncIteration


class Body(httpx2.AsyncByteStream):
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
        "_pool",
        "_pos",
        "_received",
        "_state",
        "_trailer",
    )

    def __init__(
        self,
        pool: Pool,
        conn: Conn,
        framing: int,
        length: int,
        keep_alive: bool,
        per_read: float,
    ) -> None:
        self._pool = pool
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
            self._pool.drop(self._conn)

    def _finish(self, leftover: bool) -> None:
        self._done = True
        if self._keep_alive and not leftover:
            self._pool.release(self._conn)
        else:
            self._pool.drop(self._conn)

    async def _next_length(self) -> bytes:
        data = self._buf
        if data:
            self._buf = b""
        else:
            data = await receive(self._conn, min(self._left, READ_SIZE), self._per_read)
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
        data = await receive(self._conn, READ_SIZE, self._per_read)
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
                more = await receive(self._conn, READ_SIZE, self._per_read)
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
