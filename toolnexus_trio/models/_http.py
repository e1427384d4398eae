"""One model POST with the SPEC §8 retry rules, and bounded reads of the answer.

Everything runs in the caller's task and cancel scope: a run's cancel, its deadline or
an enclosing scope aborts the request on the socket at once (httpx2 on Trio), and the
backoff sleeps are plain ``trio.sleep``. ``trio.Cancelled`` is never caught, so an
abort is never retried nor shown to ``on_error``.
"""

from __future__ import annotations

import base64
import inspect
import logging
import random
import re
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Literal

import attrs
import httpx2
import trio

from .._http_client import (
    REDACTED,
    body_chunks,
    close_response,
    error_text,
    new_client,
    own_transport,
    redact,
)
from ..loop._results import GenerateError, ProviderError

_HTTPX_LOG = logging.getLogger("httpx2")
_IMPLIED = {(b"accept", b"*/*"), (b"connection", b"keep-alive")}
"""httpx2's default headers that say what HTTP/1.1 already means (any answer type; a
kept-alive connection): left out of a model request, each header is work on both ends."""

DEFAULT_RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
"""429, the 5xx a gateway or an overloaded model answers with, and Anthropic's 529
("overloaded"), as toolnexus 0.21 retries them."""
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""A model answer larger than this (decoded) is refused: memory stays bounded."""
MAX_ERROR_BODY = 500
"""The characters of an error body a message quotes (one ``…`` marks a cut); the typed
:attr:`ProviderError.body` keeps the whole body. toolnexus 0.21 quotes 200: more of a
provider's explanation fits a message here."""
_AUTH_STATUSES = frozenset({401, 403})
_ACCOUNT_ID = re.compile(
    r'("(?:user_id|account_id|org_id|organization|organization_id)"\s*:\s*)'
    r'(?:"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*)'
)
_ERROR_READ_BYTES = 64 * 1024
_CLOSE_GRACE = 1.0
_CONNECT_TIMEOUT = 30.0
_DELAY_SECONDS = re.compile(r"[0-9]+")
_MAX_RETRY_AFTER = 2147483647


@attrs.frozen
class ErrorInfo:
    """One failed model call attempt, as ``on_error`` sees it (SPEC §8).

    ``error`` is the network exception (``None`` for an HTTP error answer); ``status``
    the HTTP status of a non-2xx answer (``None`` for a network error); ``attempt`` is
    zero-based; ``retryable`` says whether the default rule would retry (429, 5xx of
    the default set, ``retryable_statuses``, network errors).
    """

    error: Exception | None
    status: int | None
    attempt: int
    retryable: bool


OnError = Callable[[ErrorInfo], "Literal['retry', 'fail'] | Awaitable[Literal['retry', 'fail']]"]


def retry_after_seconds(value: str | None) -> int | None:
    """``Retry-After`` in delay-seconds form (ASCII digits, ``0`` to 2**31-1), else ``None``."""
    if value is None:
        return None
    value = value.strip(" \t")
    if not _DELAY_SECONDS.fullmatch(value):
        return None
    seconds = int(value)
    return seconds if seconds <= _MAX_RETRY_AFTER else None


def backoff_seconds(retry_base_ms: int, attempt: int) -> float:
    """``retry_base_ms * 2**attempt`` ms plus up to 100 ms of jitter."""
    return float(retry_base_ms * 2**attempt / 1000 + random.random() * 0.1)


def safe_error_body(status: int | None, body: str) -> str:
    """An HTTP error body safe to keep and show: ``""`` for 401 and 403 (an auth
    failure's body can echo the credential or name the account), otherwise *body* with
    the values of account identifiers (``user_id``, ``account_id``, ``org_id``,
    ``organization``) replaced by ``[redacted]``."""
    if status in _AUTH_STATUSES:
        return ""
    return _ACCOUNT_ID.sub(lambda m: f'{m.group(1)}"{REDACTED}"', body)


def capped_error_body(status: int | None, body: str) -> str:
    """:func:`safe_error_body` cut to :data:`MAX_ERROR_BODY` characters plus one ``…``:
    the form a message quotes."""
    text = safe_error_body(status, body).strip()
    return text[:MAX_ERROR_BODY] + "…" if len(text) > MAX_ERROR_BODY else text


async def read_bounded(response: httpx2.Response, limit: int | None = None) -> bytes:
    """The whole (decoded) body, refusing one larger than *limit* (``MAX_RESPONSE_BYTES``)."""
    limit = MAX_RESPONSE_BYTES if limit is None else limit
    out: list[bytes] = []
    total = 0
    # Without a content coding the raw bytes are the body: one generator less.
    encoded = "content-encoding" in response.headers
    chunks = response.aiter_bytes() if encoded else response.aiter_raw()
    finished = False
    try:
        async for chunk in chunks:
            total += len(chunk)
            if total > limit:
                raise GenerateError(f"the model's answer is larger than {limit} bytes")
            out.append(chunk)
        finished = True
    finally:
        if not finished:  # (an exhausted generator needs no closing: the common case)
            with trio.move_on_after(_CLOSE_GRACE, shield=True):
                await chunks.aclose()
    return b"".join(out)


class Poster:
    """Posts a model request with retries; one per client.

    Owns an ``httpx2.AsyncClient`` unless it was given one.
    """

    def __init__(
        self,
        *,
        http_client: httpx2.AsyncClient | None,
        retries: int,
        retry_base_ms: int,
        retryable_statuses: Collection[int] | None,
        on_error: OnError | None,
        secret: str | None,
        credentials: tuple[str, str] | None = None,
        max_retry_after: float = 60.0,
        max_connections: int | None = None,
    ) -> None:
        self._owned = http_client is None
        self.max_connections = max_connections
        self.http: httpx2.AsyncClient | None = http_client
        # Credentials of the URL (user, password), sent as basic auth; they and the
        # header that carries them are redacted like the key.
        self._auth: httpx2.BasicAuth | None = None
        self.hidden: list[str] = [secret] if secret else []
        """What no message may show: the API key, a URL's password and its basic token."""
        if credentials is not None:
            user, password = credentials
            self._auth = httpx2.BasicAuth(user, password)
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            self.hidden += [s for s in (password, token) if s]
        self.retries = retries
        self.retry_base_ms = retry_base_ms
        self.retryable = DEFAULT_RETRYABLE_STATUSES | frozenset(retryable_statuses or ())
        self.on_error = on_error
        self.secret = secret
        self.max_retry_after = max_retry_after
        self._prepared: (
            tuple[str, Mapping[str, str], httpx2.URL, list[tuple[bytes, bytes]], dict[str, Any]]
            | None
        ) = None

    async def post(
        self, url: str, headers: Mapping[str, str], content: bytes, *, stream: bool
    ) -> tuple[httpx2.Response, bytes | None]:
        """POST until a 2xx answer, retrying as SPEC §8 says.

        With ``stream=False`` the body is read (a network error while reading is retried
        too) and the response is closed; with ``stream=True`` the response is returned
        open for the caller to read and close. Raises :class:`GenerateError` when the
        attempts are spent or ``on_error`` says ``"fail"``.
        """
        attempt = 0
        while True:
            delay: int | None = None
            retry_after: str | None = None
            body = ""
            failure: GenerateError
            try:
                http = self.http or await self._make_client(url)
                request = self._request(http, url, headers, content)
                response = await self._send(http, request)
            except httpx2.TransportError as exc:
                info = ErrorInfo(exc, None, attempt, True)
                failure = self._network_failure(url, exc)
            else:
                if response.is_success:
                    if stream:
                        return response, None
                    try:
                        return response, await self._read(response)
                    except httpx2.TransportError as exc:
                        info = ErrorInfo(exc, None, attempt, True)
                        failure = self._network_failure(url, exc)
                    finally:
                        await close_response(response)
                else:
                    status = response.status_code
                    try:
                        body = await self._error_body(response)
                    finally:
                        await close_response(response)
                    info = ErrorInfo(None, status, attempt, status in self.retryable)
                    retry_after = response.headers.get("retry-after")
                    failure = self._provider_error(url, status, body, retry_after)
                    delay = retry_after_seconds(retry_after)
            if not await self._should_retry(info) or attempt >= self.retries:
                raise failure
            if delay is not None and delay > self.max_retry_after:
                # Honoured, a delay this long would hold the run for as long as the
                # server says (2**31-1 s is 68 years): the call fails now, saying so.
                raise self._too_long(url, info.status, delay, body, retry_after)
            await trio.sleep(delay if delay is not None else self.backoff(attempt))
            attempt += 1

    def _request(
        self, http: httpx2.AsyncClient, url: str, headers: Mapping[str, str], content: bytes
    ) -> httpx2.Request:
        """``http.build_request("POST", url, headers=headers, content=content)``, cheaper
        for the pool this poster owns.

        The owned client has no base URL, params or default headers of the caller's, so
        while its cookie jar is empty the request is made from a URL parsed once and the
        header list merged once (client defaults, *headers*, ``Host``), plus this body's
        ``Content-Length``: the same request, without ``build_request`` parsing and
        merging on every call.
        """
        if not self._owned or http.cookies:
            return http.build_request("POST", url, headers=headers, content=content)
        prepared = self._prepared
        if prepared is None or prepared[0] != url or prepared[1] is not headers:
            model = http.build_request("POST", url, headers=headers, content=b"")
            fixed = [
                (k, v)
                for k, v in model.headers.raw
                if k.lower() != b"content-length" and (k.lower(), v) not in _IMPLIED
            ]
            prepared = self._prepared = (url, headers, model.url, fixed, model.extensions)
        _, _, parsed, fixed, extensions = prepared
        return httpx2.Request(
            "POST",
            parsed,
            headers=[*fixed, (b"Content-Length", b"%d" % len(content))],
            stream=httpx2.ByteStream(content),
            extensions=extensions,
        )

    async def _send(self, http: httpx2.AsyncClient, request: httpx2.Request) -> httpx2.Response:
        """``http.send(request, stream=True)``, with the URL's credentials as basic auth
        (unless the caller's client has an auth of its own, which wins, as in httpx2).

        The pool this poster owns has no auth, no redirects to follow, no hooks but the
        scheme check (made when the URL was prepared) and, while its cookie jar is
        empty, nothing for ``send`` to do but hand the request to the transport: so it
        does that directly (a sixth of a loopback model call's CPU is ``send``'s layers:
        auth and redirect flows, a timing wrapper around every body chunk). A
        ``Set-Cookie`` answer still fills the jar, and from then on ``send`` is used.
        """
        if self._auth is not None and http.auth is None:
            return await http.send(request, stream=True, auth=self._auth)
        transport = self._direct_transport(http, request)
        if transport is None:
            return await http.send(request, stream=True)
        try:
            response = await transport.handle_async_request(request)
        except httpx2.RequestError as exc:
            exc.request = request  # as httpx2's send does: error_text names host and port
            raise
        response.request = request
        if "set-cookie" in response.headers:
            http.cookies.extract_cookies(response)
        if _HTTPX_LOG.isEnabledFor(logging.INFO):  # httpx2's own line for each request
            _HTTPX_LOG.info(
                'HTTP Request: %s %s "%s %d %s"',
                request.method,
                request.url,
                response.http_version,
                response.status_code,
                response.reason_phrase,
            )
        return response

    def _direct_transport(
        self, http: httpx2.AsyncClient, request: httpx2.Request
    ) -> httpx2.AsyncBaseTransport | None:
        """The owned pool's transport (the one every request of it takes: it was made
        without a proxy) when ``send`` would add nothing, else ``None``."""
        if (
            not self._owned
            or http.is_closed  # send says so, clearly
            or http.cookies
            or request.url.scheme not in ("http", "https")
        ):
            return None
        return own_transport(http)

    async def _read(self, response: httpx2.Response) -> bytes:
        """:func:`read_bounded`; the caller's :func:`close_response` closes the response
        (and so its connection) if the read fails."""
        return await read_bounded(response)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1``."""
        return backoff_seconds(self.retry_base_ms, attempt)

    @staticmethod
    def _provider_error(url: str, status: int, body: str, retry_after: str | None) -> ProviderError:
        quoted = capped_error_body(status, body) or "(empty body)"
        return ProviderError(
            f"HTTP {status} from POST {url}: {quoted}",
            status=status,
            body=body,
            retry_after=retry_after,
        )

    def _too_long(
        self, url: str, status: int | None, delay: int, body: str, retry_after: str | None
    ) -> GenerateError:
        quoted = capped_error_body(status, body) or "(empty body)"
        message = (
            f"HTTP {status} from POST {url} with Retry-After: {delay} s, longer than "
            f"max_retry_after ({self.max_retry_after:g} s), so not retried: {quoted}"
        )
        if status is None:
            return GenerateError(message)
        return ProviderError(message, status=status, body=body, retry_after=retry_after)

    def _network_failure(self, url: str, exc: Exception) -> GenerateError:
        detail = redact(error_text(exc), self.hidden)
        failure = GenerateError(f"POST {url} failed: {type(exc).__name__}: {detail}")
        failure.__cause__ = exc
        return failure

    async def _error_body(self, response: httpx2.Response) -> str:
        out: list[bytes] = []
        size = 0
        try:
            async with body_chunks(response) as chunks:
                async for chunk in chunks:
                    out.append(chunk)
                    size += len(chunk)
                    if size >= _ERROR_READ_BYTES:
                        break
        except httpx2.HTTPError:
            pass  # the status is the error; a body cut short is still worth quoting
        # The whole body read (bounded), secrets redacted; 401/403 and account ids are
        # handled by safe_error_body, the message's cut by capped_error_body.
        text = redact(b"".join(out)[:_ERROR_READ_BYTES].decode("utf-8", "replace"), self.hidden)
        return safe_error_body(response.status_code, text.strip())

    async def _should_retry(self, info: ErrorInfo) -> bool:
        if self.on_error is None:
            return info.retryable
        try:
            decision: Any = self.on_error(info)
            if inspect.isawaitable(decision):
                decision = await decision
        except Exception as exc:
            raise GenerateError(f"on_error raised {type(exc).__name__}: {exc}") from exc
        if decision == "retry":
            return True
        if decision == "fail":
            return False
        raise GenerateError(f"on_error returned {decision!r}; expected 'retry' or 'fail'")

    async def aclose(self) -> None:
        """Close the connection pool when this poster made it."""
        if self._owned and self.http is not None:
            await self.http.aclose()

    async def _make_client(self, url: str) -> httpx2.AsyncClient:
        # Only connecting has a limit of its own: a model answer can take minutes, and
        # what bounds it is the run's cancel scope (run_timeout_ms, the run's token, an
        # enclosing scope). The first client of the process loads the CA bundle in a
        # worker thread, so another run may have made the pool meanwhile.
        # An http:// model (a local server) never needs the CA bundle: no redirects are
        # followed, so its client only ever sends plain http (TLS through it fails closed).
        plain = url[:7].lower() == "http://"
        made = await new_client(
            connect_timeout=_CONNECT_TIMEOUT,
            plain_http=plain,
            max_connections=self.max_connections,
        )
        if self.http is None:
            self.http = made
        else:
            await made.aclose()
        return self.http
