"""The connection pool under the package's HTTP clients (:mod:`._http_client`).

:class:`PoolTransport` is httpx2's public transport interface over a public
``httpcore2.AsyncConnectionPool`` that connects through :class:`_DirectBackend`: a host
that is an IP literal or ``localhost`` is connected to directly, with one non-blocking
``connect`` in the caller's task, and the connection is a lean stream of our own
(:class:`_DirectStream`; TLS on it is :class:`_TLSStream`, a ``trio.SSLStream``). Any
other host takes httpcore2's own Trio backend. Only public names of httpx2, httpcore2
and Trio are used: httpx2's own transport has no argument for a network backend, so
the pool is ours (tests/test_no_private.py).

The pool's limits (:data:`LIMITS`): no cap on connections, at most
:data:`MAX_KEEPALIVE_CONNECTIONS` idle ones kept, each for :data:`KEEPALIVE_EXPIRY`
seconds. Without a cap the transport spreads its requests over :data:`SHARDS` pools,
so that httpcore2's per-request scan of its connections stays short with a thousand
conversations in flight.
"""

from __future__ import annotations

import contextlib
import errno
import math
import operator
import os
import select
import socket
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, cast

import httpcore2
import httpx2
import trio

from ._streak import ReadyStreak

_CLOSE_GRACE = 1.0

_LOOPBACK = {"localhost": ("127.0.0.1", "::1"), "localhost.": ("127.0.0.1", "::1")}


def _direct_addresses(host: str) -> tuple[str, ...] | None:
    """The addresses to connect to without a resolver (an IP literal, or localhost's
    loopback), or ``None`` for a name that needs one."""
    loopback = _LOOPBACK.get(host.lower())
    if loopback is not None:
        return loopback
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return (host,)
    return None


class _DirectStream(httpcore2.AsyncNetworkStream):
    """A plain TCP connection on a non-blocking socket, for httpcore2 (see the module
    doc's direct connect).

    httpcore2's own Trio stream wraps each read and write in a ``trio.SocketStream`` call,
    a cancel scope and an exception-mapping context manager; on a loopback model that
    shows (about a fifth of a model call's CPU). Here:

    - **Every operation is a cancel point** (``checkpoint_if_cancelled`` first), and it
      waits in ``wait_readable`` / ``wait_writable`` only when the socket is not ready;
      one the socket could serve at once yields to the scheduler only every few in a
      row (:mod:`toolnexus_trio._streak`).
    - **Writes wait for the next read.** httpcore2 writes a request's head and its body
      separately and then reads the answer; the bytes are held until that read (or
      until :data:`_HOLD_BYTES` are held, or the stream is closed, or TLS starts) and
      sent in one ``send``: one system call and one TCP segment less per request, and
      a server never sees a head without its body (a request held back is never
      resent: its bytes are sent at most once, in order).
    - A read or write timeout (the package's clients never set one; a caller's own
      client may) is a ``trio.fail_after`` mapped to httpcore2's timeout errors.
    - ``start_tls`` hands the socket to a :class:`_TLSStream` (``trio.SSLStream``).
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._streak = ReadyStreak()

    async def _send_held(self) -> None:
        data = b"".join(self._held) if len(self._held) > 1 else self._held[0]
        self._held.clear()
        self._held_bytes = 0
        view = memoryview(data)
        try:
            while view:
                try:
                    sent = self._sock.send(view)
                except BlockingIOError:
                    self._streak.waited()
                    await trio.lowlevel.wait_writable(self._sock)
                    continue
                view = view[sent:]
        except OSError as exc:  # reset, broken pipe, closed meanwhile
            raise httpcore2.WriteError(exc) from exc

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        if timeout is not None:
            with _mapped(trio.TooSlowError, httpcore2.ReadTimeout), trio.fail_after(timeout):
                return await self.read(max_bytes)
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._held:
            # What httpcore2 does when a request write fails: read on, since a server
            # may answer early (an error response) and close before taking the whole
            # request.
            with contextlib.suppress(httpcore2.WriteError):
                await self._send_held()
        while True:
            try:
                data = self._sock.recv(max_bytes)
            except BlockingIOError:
                self._streak.waited()
                await trio.lowlevel.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise httpcore2.ReadError(exc) from exc
            await self._streak.done()
            return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        if timeout is not None:
            with _mapped(trio.TooSlowError, httpcore2.WriteTimeout), trio.fail_after(timeout):
                return await self.write(buffer)
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._sock.fileno() < 0:
            raise httpcore2.WriteError("the connection is closed")
        self._held.append(bytes(buffer))
        self._held_bytes += len(buffer)
        if self._held_bytes >= _HOLD_BYTES:
            await self._send_held()
        await self._streak.done()

    async def aclose(self) -> None:
        # Bytes still held were written by a request that will never read its answer
        # (cancelled or failed between its write and its read): dropping them is what
        # closing a socket with unsent bytes would do.
        self._held.clear()
        if self._sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self._sock)
            self._sock.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's stream interface
    ) -> httpcore2.AsyncNetworkStream:
        if self._held:
            await self._send_held()
        plain = trio.SocketStream(trio.socket.from_stdlib_socket(self._sock))
        return await _TLSStream.handshake(plain, self._sock, ssl_context, server_hostname, timeout)

    def get_extra_info(self, info: str) -> Any:
        if info == "socket":
            return self._sock
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        if info == "is_readable":  # an idle kept-alive connection the server closed
            try:
                self._sock.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                return False
            except OSError:
                return True
            return True
        return None


class _TLSStream(httpcore2.AsyncNetworkStream):
    """A TLS connection (``trio.SSLStream``) for httpcore2, after a direct connect.

    The same contract as httpcore2's own Trio stream, built on public types: Trio's
    broken or closed stream errors are httpcore2's read, write and connect errors, and a
    timeout (the package's clients set only the connect one) is a ``trio.fail_after``.
    ``ssl_object`` is the ``trio.SSLStream``, which offers the ``ssl.SSLObject``
    methods httpcore2 asks for (``selected_alpn_protocol``, ``getpeercert``).
    """

    def __init__(self, stream: trio.SSLStream[trio.abc.Stream], sock: socket.socket) -> None:
        self._stream = stream
        self._sock = sock

    @classmethod
    async def handshake(
        cls,
        transport: trio.abc.Stream,
        sock: socket.socket,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None,
        timeout: float | None,  # noqa: ASYNC109 - httpcore2's stream interface
    ) -> _TLSStream:
        """*transport* wrapped in TLS, the handshake done; a failure closes it."""
        stream = trio.SSLStream(
            transport,
            ssl_context,
            server_hostname=server_hostname,
            https_compatible=True,  # servers that close without close_notify
        )
        try:
            with (
                _mapped(trio.TooSlowError, httpcore2.ConnectTimeout),
                _mapped(trio.BrokenResourceError, httpcore2.ConnectError),
                trio.fail_after(math.inf if timeout is None else timeout),
            ):
                await stream.do_handshake()
        except BaseException:
            with trio.move_on_after(_CLOSE_GRACE, shield=True):
                await trio.aclose_forcefully(stream)
            raise
        return cls(stream, sock)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        with (
            _mapped(trio.TooSlowError, httpcore2.ReadTimeout),
            _mapped((trio.BrokenResourceError, trio.ClosedResourceError), httpcore2.ReadError),
            trio.fail_after(math.inf if timeout is None else timeout),
        ):
            return bytes(await self._stream.receive_some(max_bytes))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        with (
            _mapped(trio.TooSlowError, httpcore2.WriteTimeout),
            _mapped((trio.BrokenResourceError, trio.ClosedResourceError), httpcore2.WriteError),
            trio.fail_after(math.inf if timeout is None else timeout),
        ):
            await self._stream.send_all(buffer)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's stream interface
    ) -> httpcore2.AsyncNetworkStream:
        # TLS in TLS (an https proxy's tunnel): httpcore2 asks, Trio can.
        return await _TLSStream.handshake(
            self._stream, self._sock, ssl_context, server_hostname, timeout
        )

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._stream
        if info == "socket":
            return self._sock
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        if info == "is_readable":  # bytes or an EOF on an idle connection: not reusable
            return _readable_now(self._sock)
        return None


_HOLD_BYTES = 65536
"""Bytes written and held before they are sent without waiting for a read."""


@contextmanager
def _mapped(
    source: type[Exception] | tuple[type[Exception], ...], target: type[Exception]
) -> Iterator[None]:
    try:
        yield
    except source as exc:
        raise target(str(exc)) from exc


class _ConnectTimedOut(Exception):
    """The connect deadline passed while the handshake was under way."""


async def _connect(address: str, port: int, deadline: float = math.inf) -> socket.socket:
    """A connected non-blocking TCP socket (``TCP_NODELAY``, as Trio sets it); a cancel,
    a failure or the *deadline* (Trio time; :class:`_ConnectTimedOut`) closes it. The
    deadline's cancel scope is only made when the handshake has to be waited for."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    await trio.lowlevel.checkpoint_if_cancelled()
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        error = sock.connect_ex((address, port))
        if error in _IN_PROGRESS:
            # On loopback the handshake is done by the time connect returns (it still
            # says EINPROGRESS): a zero-timeout poll sees that, without registering the
            # socket with Trio's epoll and waiting a scheduler pass for it.
            if not _writable_now(sock):
                with trio.move_on_at(deadline) as bound:
                    await trio.lowlevel.wait_writable(sock)
                if bound.cancelled_caught:
                    raise _ConnectTimedOut
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            raise OSError(error, f"Error connecting to {(address, port)!r}: {os.strerror(error)}")
    except BaseException:
        sock.close()
        raise
    return sock


_IN_PROGRESS = frozenset({errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK})


def _writable_now(sock: socket.socket) -> bool:
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    return bool(poller.poll(0))


def _readable_now(sock: socket.socket) -> bool:
    if sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class _DirectBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's Trio backend, except that an IP literal or ``localhost`` is connected
    to directly (see the module doc)."""

    def __init__(self) -> None:
        self._trio = httpcore2.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's backend interface
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore2.AsyncNetworkStream:
        addresses = _direct_addresses(host)
        if addresses is None or local_address is not None or socket_options:
            return await self._trio.connect_tcp(host, port, timeout, local_address, socket_options)
        failure: OSError | None = None
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        for address in addresses:  # one deadline for all of them
            try:
                sock = await _connect(address, port, deadline)  # a cancel closes the socket
            except OSError as exc:
                failure = exc
                continue
            except _ConnectTimedOut:
                raise httpcore2.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
            return _DirectStream(sock)
        assert failure is not None
        error = httpcore2.ConnectError(failure)
        # httpcore2's pool re-raises ``from None``: the context keeps the OS's reason
        # for error_text, as it does on httpcore2's own path.
        error.__context__ = failure
        raise error from failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's backend interface
        socket_options: Any = None,
    ) -> httpcore2.AsyncNetworkStream:
        return await self._trio.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._trio.sleep(seconds)


#: The owned pools' limits: no cap on connections, so a thousand conversations in one
#: process are a thousand requests in flight (httpx2's default stops at 100 and the
#: rest wait for a free connection); idle connections kept for reuse are bounded.
MAX_KEEPALIVE_CONNECTIONS = 1000
KEEPALIVE_EXPIRY = 5.0
LIMITS = httpx2.Limits(
    max_connections=None,
    max_keepalive_connections=MAX_KEEPALIVE_CONNECTIONS,
    keepalive_expiry=KEEPALIVE_EXPIRY,
)

_TO_HTTPX: dict[type[Exception], type[httpx2.TransportError]] = {
    httpcore2.ConnectTimeout: httpx2.ConnectTimeout,
    httpcore2.ReadTimeout: httpx2.ReadTimeout,
    httpcore2.WriteTimeout: httpx2.WriteTimeout,
    httpcore2.PoolTimeout: httpx2.PoolTimeout,
    httpcore2.TimeoutException: httpx2.TimeoutException,
    httpcore2.ConnectError: httpx2.ConnectError,
    httpcore2.ReadError: httpx2.ReadError,
    httpcore2.WriteError: httpx2.WriteError,
    httpcore2.NetworkError: httpx2.NetworkError,
    httpcore2.ProxyError: httpx2.ProxyError,
    httpcore2.UnsupportedProtocol: httpx2.UnsupportedProtocol,
    httpcore2.LocalProtocolError: httpx2.LocalProtocolError,
    httpcore2.RemoteProtocolError: httpx2.RemoteProtocolError,
    httpcore2.ProtocolError: httpx2.ProtocolError,
}
"""httpcore2's errors as httpx2's (the same names; the most specific class wins)."""


_FROM_HTTPCORE = tuple(_TO_HTTPX)


@contextmanager
def _as_httpx() -> Iterator[None]:
    """Raise an httpcore2 error as httpx2's error of the same name (its message kept, the
    original as its cause), as httpx2's own transport does."""
    try:
        yield
    except _FROM_HTTPCORE as exc:
        raise _translated(exc) from exc


def _translated(exc: Exception) -> httpx2.TransportError:
    for kind in type(exc).__mro__:
        target = _TO_HTTPX.get(kind)
        if target is not None:
            return target(str(exc))
    return httpx2.TransportError(str(exc))  # (not reached: every root is mapped)


SHARDS = 64
"""The connection pools an uncapped transport spreads its requests over.

httpcore2's pool scans every connection it holds (and every request waiting) on each
request and on each answer's close, and asks each idle connection whether the server
closed it: with a thousand connections in one pool that scan is most of a streamed
model call's CPU (measured on the loopback FakeProvider, one pool: 4.5 ms a call at
1,000 conversations against 1.5 ms at 200, two thirds of it in
``AsyncConnectionPool._assign_requests_to_connections``; over 64 pools: 1.1 ms against
0.8 ms). A capped transport (``max_connections``) keeps one pool, so the cap is exact.
"""


class _Shard:
    """One pool of a transport and the requests it has in flight (sent, body open)."""

    __slots__ = ("busy", "pool")

    def __init__(self, pool: httpcore2.AsyncConnectionPool) -> None:
        self.pool = pool
        self.busy = 0


class _Body(httpx2.AsyncByteStream):
    """A response body from the pool, for httpx2: its parts, httpcore2's errors as
    httpx2's; closing it releases the connection (and its shard's count).

    An iterator object, not an async generator: left early, nothing of ours is left
    for the garbage collector, and the pool's own iterator is closed here.
    """

    def __init__(self, parts: AsyncIterable[bytes], shard: _Shard) -> None:
        self._parts = parts
        self._iterator: AsyncIterator[bytes] | None = None
        self._shard: _Shard | None = shard

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if self._iterator is None:
            self._iterator = aiter(self._parts)
        try:  # (per chunk: a plain try, not the context manager)
            return await anext(self._iterator)
        except _FROM_HTTPCORE as exc:
            raise _translated(exc) from exc

    async def aclose(self) -> None:
        if self._shard is not None:  # once, and before anything that can be cancelled
            self._shard.busy -= 1
            self._shard = None
        iterator, self._iterator = self._iterator, None
        close = getattr(iterator, "aclose", None)  # an async generator's
        with _as_httpx():
            if close is not None:
                await close()
            close = getattr(self._parts, "aclose", None)
            if close is not None:
                await close()


class PoolTransport(httpx2.AsyncBaseTransport):
    """httpx2's transport contract on ``httpcore2.AsyncConnectionPool`` s of our own,
    which connect through :class:`_DirectBackend` (httpx2's own transport has no
    argument for a network backend). Requests and answers pass through unchanged,
    with httpcore2's errors raised as httpx2's (:func:`_as_httpx`).

    Without a cap on connections the requests are spread over :data:`SHARDS` pools:
    each goes to the pool with the fewest requests in flight, the first of equals, so
    one conversation alone keeps reusing one connection. Idle connections kept are
    bounded over all of them (each pool keeps its share).
    """

    def __init__(self, ssl_context: ssl.SSLContext, limits: httpx2.Limits = LIMITS) -> None:
        count = SHARDS if limits.max_connections is None else 1
        keep = limits.max_keepalive_connections
        backend = _DirectBackend()
        self.shards = [
            _Shard(
                httpcore2.AsyncConnectionPool(
                    ssl_context=ssl_context,
                    max_connections=limits.max_connections,
                    max_keepalive_connections=None if keep is None else -(-keep // count),
                    keepalive_expiry=limits.keepalive_expiry,
                    network_backend=backend,
                )
            )
            for _ in range(count)
        ]

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        core = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=cast("AsyncIterable[bytes]", request.stream),
            extensions=request.extensions,
        )
        shards = self.shards
        shard = shards[0] if len(shards) == 1 else min(shards, key=_busy)
        shard.busy += 1
        try:
            answer = await shard.pool.handle_async_request(core)
        except _FROM_HTTPCORE as exc:
            shard.busy -= 1
            raise _translated(exc) from exc
        except BaseException:
            shard.busy -= 1
            raise
        return httpx2.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(cast("AsyncIterable[bytes]", answer.stream), shard),
            extensions=answer.extensions,
        )

    async def aclose(self) -> None:
        with _as_httpx():
            for shard in self.shards:
                await shard.pool.aclose()


_busy = operator.attrgetter("busy")
