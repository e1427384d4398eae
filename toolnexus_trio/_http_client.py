"""The one factory of HTTP clients: the model client, ``webfetch`` and ``http_tool``.

Every client the package makes is an ``httpx2.AsyncClient`` on httpx2's own transport
(httpcore2 on Trio), made by :func:`new_client`, so the three share one set of rules:

- TLS verified by httpx2's default context (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when
  set), loaded once per process, in a worker thread (it is blocking file I/O).
- Proxies from the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, minus
  ``NO_PROXY``): httpx2's ``trust_env``.
- Nothing is ever sent twice by the transport: httpcore2's ``retries`` (which would
  only re-dial a failed *connect*) stays at its default of 0, and a request that
  failed once a byte of it was written surfaces as an httpx2 error; only the caller's
  own rules retry.
- Only ``http`` and ``https`` URLs are sent, redirects included (httpcore2 would also
  send plain HTTP to ``ws://`` and ``wss://`` URLs).
- No timeout but the connect one the caller asks for: the caller's Trio cancel scope
  bounds the rest, and a cancel closes the socket at once.
- A host that is an IP literal or ``localhost`` is connected to directly (one
  non-blocking ``connect`` in the caller's task): no resolver, and no happy-eyeballs
  nursery racing a single address (``trio.open_tcp_stream`` costs about twice a plain
  connect on loopback), and the connection is a lean stream of our own on the
  non-blocking socket (:class:`_DirectStream`: a request's writes held until its read
  and sent as one). ``localhost`` is the loopback address (RFC 6761): ``127.0.0.1``,
  then ``::1``. Any other host, and any connect with a local address or socket options,
  takes httpcore2's own path.
- A client that only ever sends plain ``http`` (``plain_http=True``; the model client
  for an ``http://`` base URL) does not load the CA bundle at all: its origin TLS
  context trusts no certificate, so a TLS handshake through it could only fail
  (verification stays on). Proxies keep their own verified context.

Also here, for the same three callers: closing a streamed response under a cancel,
credentials in a URL (sent as basic auth, never printed), and one error text that
names what failed (for a refused connection: the host, the port and the operating
system's reason, which httpx2's own message leaves out).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
import socket
import ssl
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpcore2
import httpx2
import trio

# httpcore2 exports its Trio backend but not the stream type the backend returns; the
# direct connect below hands back the same stream type.
from httpcore2._backends.trio import TrioStream

from ._groups import leaf_exceptions
from ._streak import ReadyStreak

REDACTED = "[redacted]"
_CLOSE_GRACE = 1.0
_SCHEMES = frozenset({"http", "https"})

_ssl_context: ssl.SSLContext | None = None


def _load_ssl_context() -> ssl.SSLContext:
    global _ssl_context
    if _ssl_context is None:
        _ssl_context = httpx2.create_ssl_context()
    return _ssl_context


def _no_tls_context() -> ssl.SSLContext:
    """An origin TLS context for a client that only sends plain ``http``: certificate and
    host name verification on, no CA trusted (nothing loaded, so it costs nothing), so a
    handshake through it fails closed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
    return context


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
    - ``start_tls`` hands the socket to httpcore2's Trio stream (TLS is its code path).
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
        plain = TrioStream(trio.SocketStream(trio.socket.from_stdlib_socket(self._sock)))
        return await plain.start_tls(ssl_context, server_hostname, timeout)

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


_HOLD_BYTES = 65536
"""Bytes written and held before they are sent without waiting for a read."""


@contextmanager
def _mapped(source: type[Exception], target: type[Exception]) -> Iterator[None]:
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


def _connect_directly(client: httpx2.AsyncClient) -> httpx2.AsyncClient:
    """Give *client*'s own connection pool the direct-connect backend.

    httpx2 has no ``network_backend`` argument, so the pool it made is given the backend
    here (proxied URLs go through the proxy transports, untouched).
    """
    pool = getattr(client._transport, "_pool", None)
    if isinstance(pool, httpcore2.AsyncConnectionPool):
        pool._network_backend = _DirectBackend()
    return client


async def _only_http(request: httpx2.Request) -> None:
    """A request hook: refuse any scheme but http(s), on the first hop or a redirect."""
    if request.url.scheme not in _SCHEMES:
        raise httpx2.UnsupportedProtocol(
            f"unsupported URL scheme {request.url.scheme!r}", request=request
        )


def new_client_blocking(
    *,
    connect_timeout: float | None = None,
    follow_redirects: bool = False,
    plain_http: bool = False,
) -> httpx2.AsyncClient:
    """:func:`new_client` for a caller outside Trio; the first call of the process
    blocks while it loads the CA bundle (unless *plain_http*)."""
    client = httpx2.AsyncClient(
        verify=_no_tls_context() if plain_http else _load_ssl_context(),
        timeout=httpx2.Timeout(None, connect=connect_timeout),
        follow_redirects=follow_redirects,
        trust_env=True,
        event_hooks={"request": [_only_http]},
    )
    return _connect_directly(client)


async def new_client(
    *,
    connect_timeout: float | None = None,
    follow_redirects: bool = False,
    plain_http: bool = False,
) -> httpx2.AsyncClient:
    """A new ``httpx2.AsyncClient`` with the rules of the module doc; close it with
    ``aclose``.

    *connect_timeout* (seconds, ``None``: none) bounds connecting; nothing else has a
    limit of its own. *plain_http*: the caller only ever sends ``http`` URLs without
    redirects (no CA bundle is loaded; TLS through the client fails closed).
    """
    if _ssl_context is None and not plain_http:  # the first client: the CA bundle, off-loop
        await trio.to_thread.run_sync(_load_ssl_context)
    return new_client_blocking(
        connect_timeout=connect_timeout, follow_redirects=follow_redirects, plain_http=plain_http
    )


# -- responses ------------------------------------------------------------------


async def close_response(response: httpx2.Response) -> None:
    """Close *response* even while the caller is being cancelled (bounded, shielded)."""
    if response.is_closed:
        return  # read to its end: httpx2 has closed it already
    with trio.move_on_after(_CLOSE_GRACE, shield=True):
        await response.aclose()


@asynccontextmanager
async def body_chunks(response: httpx2.Response) -> AsyncIterator[AsyncIterator[bytes]]:
    """``response.aiter_bytes()``, closed on the way out even when left early or cancelled.

    (Left to the garbage collector, a half-read async generator is finalized outside
    any task.)
    """
    chunks = response.aiter_bytes()
    try:
        yield chunks
    finally:
        with trio.move_on_after(_CLOSE_GRACE, shield=True):
            await chunks.aclose()


# -- credentials in URLs ------------------------------------------------------------


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """*url* without its ``user:password@``, and those two, decoded (``None`` if none).

    Sent as basic auth (as httpx2 does for a URL with credentials), they are then only
    in the ``Authorization`` header, never in a URL that a log line or an error shows.
    """
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    plain = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return plain, (unquote(user), unquote(password))


def url_secrets(url: str) -> list[str]:
    """The password of *url* as written and decoded (empty when it has none)."""
    password = urlsplit(url).password
    if not password:
        return []
    return list(dict.fromkeys([password, unquote(password)]))


def safe_url(url: str) -> str:
    """*url* as it may be shown: a password in it replaced by ``[redacted]``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    netloc = f"{user}:{REDACTED}@{hostport}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def redact(text: str, secrets: Sequence[str]) -> str:
    """*text* with every non-empty secret of *secrets* replaced by ``[redacted]``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


# -- errors -------------------------------------------------------------------------


def _reason(exc: BaseException) -> str | None:
    """What the operating system (or TLS) said, for one exception of a cause chain."""
    if isinstance(exc, ssl.SSLError):
        return str(exc)  # e.g. "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"
    if isinstance(exc, socket.gaierror):
        return exc.strerror or str(exc)  # e.g. "Name or service not known"
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)  # e.g. "Connection refused"
    return None


def _reasons(exc: BaseException) -> list[str]:
    """The distinct reasons found under *exc* (its causes, contexts and group leaves)."""
    found: list[str] = []
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            todo.extend(reversed(list(leaf_exceptions(current))))
            continue
        reason = _reason(current)
        if reason is not None and reason not in found:
            found.append(reason)
        todo.extend(e for e in (current.__context__, current.__cause__) if e is not None)
    return found


def _where(exc: httpx2.RequestError) -> str | None:
    try:
        url = exc.request.url
    except RuntimeError:  # an error raised without its request
        return None
    port = url.port or (443 if url.scheme == "https" else 80)
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{port}"


def error_text(exc: BaseException) -> str:
    """The text of a network error for a message: ``str(exc)``, except that a failed
    connect names the host, the port and the operating system's reason (``cannot
    connect to 127.0.0.1:8080: Connection refused``), and an empty message is the
    exception's type name."""
    if isinstance(exc, httpx2.ConnectTimeout):
        where = _where(exc)
        return f"connecting to {where} timed out" if where else (str(exc) or "connect timed out")
    if isinstance(exc, httpx2.ConnectError):
        where = _where(exc)
        why = "; ".join(_reasons(exc)) or str(exc) or type(exc).__name__
        return f"cannot connect to {where}: {why}" if where else why
    return str(exc) or type(exc).__name__
