"""The one factory of HTTP clients: the model client, ``webfetch`` and ``http_tool``.

Every client the package makes is an ``httpx2.AsyncClient`` made by :func:`new_client`,
on a transport of our own (:class:`~._http_pool.PoolTransport`: httpx2's public
transport interface over a public ``httpcore2.AsyncConnectionPool`` on Trio, connecting
through our network backend), so the three share one set of rules:

- TLS verified by httpx2's default context (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when
  set), loaded once per process, in a worker thread (it is blocking file I/O).
- Proxies from the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, minus
  ``NO_PROXY``): httpx2's ``trust_env``. When the environment names a proxy, the
  client is httpx2's own (its transports, proxies and ``NO_PROXY`` rules, with the
  limits below), without the direct connect.
- No cap on connections: a client shared by a thousand conversations has a thousand
  requests in flight, not 100 and a queue (httpx2's default); at most
  :data:`~._http_pool.MAX_KEEPALIVE_CONNECTIONS` idle ones are kept for reuse, each
  for :data:`~._http_pool.KEEPALIVE_EXPIRY` seconds.
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
  and sent as one; TLS on it is a ``trio.SSLStream``). ``localhost`` is the loopback
  address (RFC 6761): ``127.0.0.1``, then ``::1``. Any other host, and any connect with
  a local address or socket options, takes httpcore2's own Trio backend.
- A client that only ever sends plain ``http`` (``plain_http=True``; the model client
  for an ``http://`` base URL) does not load the CA bundle at all: its origin TLS
  context trusts no certificate, so a TLS handshake through it could only fail
  (verification stays on). Proxies keep their own verified context.

Only public names of httpx2 and httpcore2 are used (tests/test_no_private.py).

Also here, for the same three callers: closing a streamed response under a cancel,
credentials in a URL (sent as basic auth, never printed), and one error text that
names what failed (for a refused connection: the host, the port and the operating
system's reason, which httpx2's own message leaves out).
"""

from __future__ import annotations

import os
import socket
import ssl
import urllib.request
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx2
import trio

from ._groups import leaf_exceptions
from ._http_pool import LIMITS, PoolTransport

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


_OWN_TRANSPORT: weakref.WeakKeyDictionary[httpx2.AsyncClient, PoolTransport] = (
    weakref.WeakKeyDictionary()
)


def own_transport(client: httpx2.AsyncClient) -> httpx2.AsyncBaseTransport | None:
    """The transport every request of *client* takes, when :func:`new_client` made it
    without a proxy (else ``None``): a caller that adds nothing to ``send`` (no auth,
    redirects, hooks or cookies) may hand a request to it directly."""
    return _OWN_TRANSPORT.get(client)


def _env_proxies() -> bool:
    """Whether the environment names a proxy for http(s) (what httpx2's ``trust_env``
    reads: ``urllib.request.getproxies``)."""
    found = urllib.request.getproxies()
    return any(found.get(scheme) for scheme in ("http", "https", "all"))


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
    max_connections: int | None = None,
) -> httpx2.AsyncClient:
    """:func:`new_client` for a caller outside Trio; the first call of the process
    blocks while it loads the CA bundle (unless *plain_http*)."""
    verify = _no_tls_context() if plain_http else _load_ssl_context()
    limits = LIMITS
    if max_connections is not None:
        limits = httpx2.Limits(
            max_connections=max_connections,
            max_keepalive_connections=LIMITS.max_keepalive_connections,
            keepalive_expiry=LIMITS.keepalive_expiry,
        )
    transport = None if _env_proxies() else PoolTransport(verify, limits)
    client = httpx2.AsyncClient(
        verify=verify,
        timeout=httpx2.Timeout(None, connect=connect_timeout),
        follow_redirects=follow_redirects,
        trust_env=True,
        limits=limits,
        event_hooks={"request": [_only_http]},
        transport=transport,
    )
    if transport is not None:
        _OWN_TRANSPORT[client] = transport
    return client


async def new_client(
    *,
    connect_timeout: float | None = None,
    follow_redirects: bool = False,
    plain_http: bool = False,
    max_connections: int | None = None,
) -> httpx2.AsyncClient:
    """A new ``httpx2.AsyncClient`` with the rules of the module doc; close it with
    ``aclose``.

    *connect_timeout* (seconds, ``None``: none) bounds connecting; nothing else has a
    limit of its own. *plain_http*: the caller only ever sends ``http`` URLs without
    redirects (no CA bundle is loaded; TLS through the client fails closed).
    *max_connections*: the most connections open at once (``None``: no cap); a request
    beyond it waits for one to be free.
    """
    if _ssl_context is None and not plain_http:  # the first client: the CA bundle, off-loop
        await trio.to_thread.run_sync(_load_ssl_context)
    return new_client_blocking(
        connect_timeout=connect_timeout,
        follow_redirects=follow_redirects,
        plain_http=plain_http,
        max_connections=max_connections,
    )


# -- responses ------------------------------------------------------------------


async def close_response(response: httpx2.Response) -> None:
    """Close *response* even while the caller is being cancelled (bounded, shielded)."""
    if response.is_closed:
        return  # read to its end: httpx2 has closed it already
    with trio.move_on_after(_CLOSE_GRACE, shield=True):
        await response.aclose()


class body_chunks:  # lower case: called as the function it was, `async with body_chunks(r)`
    """``response.aiter_bytes()``, closed on the way out even when left early or cancelled.

    (Left to the garbage collector, a half-read async generator is finalized outside
    any task.) A class rather than an ``@asynccontextmanager``: a streamed model answer
    holds it for as long as it streams, and a generator's frame and wrapper are most
    of a kilobyte per conversation in flight.
    """

    __slots__ = ("_chunks",)

    def __init__(self, response: httpx2.Response) -> None:
        self._chunks: AsyncGenerator[bytes, None] = response.aiter_bytes()

    async def __aenter__(self) -> AsyncIterator[bytes]:
        return self._chunks

    async def __aexit__(self, *exc_info: object) -> None:
        with trio.move_on_after(_CLOSE_GRACE, shield=True):
            await self._chunks.aclose()


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
