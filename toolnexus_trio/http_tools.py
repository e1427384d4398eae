"""HTTP tools (SPEC §7): a REST endpoint declared as a :class:`~toolnexus_trio.Tool`.

:func:`http_tool` fills ``{placeholder}`` s of the URL's path and query from the
arguments (URL-encoded), sends ``query`` arguments as the query string and the rest as
a JSON (or form, or raw) body, expands ``${ENV}`` in header values, and returns the
response body. The request runs in the caller's task on httpx2: a cancel, the tool's
``timeout_ms`` or the loop's ``tool_timeout_ms`` aborts it on the socket at once.

Redirects are followed here, hop by hop, rather than by httpx2 (which strips only
``Authorization`` when a redirect leaves the origin): the configured headers carry
secrets (``${ENV}``), so they go to the tool's own origin only, and once a redirect
has left it no later hop gets them.
"""

from __future__ import annotations

import codecs
import json
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote, urlencode, urlsplit

import httpx2
import trio

from ._http_client import (
    body_chunks,
    close_response,
    error_text,
    new_client,
    redact,
    safe_url,
    split_credentials,
    url_secrets,
)
from ._schema import JSONSchema
from ._tools import Tool, ToolContext, ToolResult, ToolSource

logger = logging.getLogger("toolnexus_trio")

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024
ERROR_BODY_CHARS = 2000
"""A non-2xx body is quoted up to this many characters in ``HTTP <status>: <body>``."""
_ERROR_READ_BYTES = 4 * ERROR_BODY_CHARS  # UTF-8 needs at most 4 bytes a character
_CLOSE_GRACE = 1.0

_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
_METHOD = re.compile(r"[A-Z]{1,20}")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]*)\}")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_QUERY_METHODS = frozenset({"GET", "HEAD"})

BodyMode = Literal["json", "form", "raw"]
ResultMode = Literal["text", "json", "status+text"]


def _text(value: Any) -> str:
    """An argument as URL or form text: strings as they are, ``true``/``false``,
    numbers as JSON writes them, lists and objects as compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _pairs(name: str, value: Any) -> list[tuple[str, str]]:
    """Query or form pairs for one argument: ``null`` sends nothing, a list repeats."""
    if value is None:
        return []
    if isinstance(value, list):
        return [(name, _text(v)) for v in value if v is not None]
    return [(name, _text(value))]


class _Template:
    """The URL, split so that placeholders may sit only in the path and the query."""

    def __init__(self, url: str) -> None:
        shown = safe_url(url)
        # Credentials in the URL are sent as basic auth, like a configured header.
        url, self.credentials = split_credentials(url)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"http_tool url must be an absolute http(s) URL, not {shown!r}")
        if _PLACEHOLDER.search(parts.netloc) or "{" in parts.netloc:
            raise ValueError("http_tool url: placeholders belong in the path or the query")
        if parts.fragment:
            raise ValueError("http_tool url: a fragment is never sent; remove it")
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.path = parts.path or "/"
        self.query = parts.query
        for piece in (self.path, self.query):
            if "{" in _PLACEHOLDER.sub("", piece) or "}" in _PLACEHOLDER.sub("", piece):
                raise ValueError(f"http_tool url has an unmatched brace: {shown!r}")
        self.names: list[str] = list(
            dict.fromkeys(_PLACEHOLDER.findall(self.path) + _PLACEHOLDER.findall(self.query))
        )

    def fill(self, args: Mapping[str, Any]) -> str:
        """The URL with each placeholder's argument, URL-encoded (``/`` included).

        Raises :class:`ValueError` for a missing argument, and for ``.`` or ``..`` in the
        path (which would climb out of the declared path).
        """

        def value(match: re.Match[str], *, in_path: bool) -> str:
            name = match[1]
            if args.get(name) is None:
                raise ValueError(f"missing argument {name!r} for the URL placeholder {{{name}}}")
            text = _text(args[name])
            if in_path and text in (".", ".."):
                raise ValueError(f"argument {name!r} may not be {text!r} in a URL path")
            return quote(text, safe="")

        path = _PLACEHOLDER.sub(lambda m: value(m, in_path=True), self.path)
        query = _PLACEHOLDER.sub(lambda m: value(m, in_path=False), self.query)
        return self.origin + path + (f"?{query}" if query else "")


def _expand(value: str, secrets: list[str]) -> str:
    def env(match: re.Match[str]) -> str:
        found = os.environ.get(match[1])
        if found is None:
            logger.warning("toolnexus_trio: http_tool header: ${%s} is not set", match[1])
            return ""
        if found:
            secrets.append(found)
        return found

    return _ENV.sub(env, value)


def _charset(response: httpx2.Response) -> str:
    name = response.charset_encoding or "utf-8"
    try:
        return codecs.lookup(name).name
    except LookupError:
        return "utf-8"


async def _read(response: httpx2.Response, limit: int) -> tuple[bytes, bool]:
    """Up to *limit* bytes of the (decoded) body, and whether there was more."""
    out = bytearray()
    async with body_chunks(response) as chunks:
        async for chunk in chunks:
            out += chunk
            if len(out) > limit:
                return bytes(out[:limit]), True
    return bytes(out), False


def _origin(url: httpx2.URL) -> tuple[str, str, int]:
    return url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80)


def _redirect_method(method: str, status: int) -> str:
    """The method of the next hop (RFC 9110, and what browsers do with 301/302)."""
    if status in (302, 303) and method != "HEAD":
        return "GET"
    if status == 301 and method == "POST":
        return "GET"
    return method


async def _exchange(
    client: httpx2.AsyncClient,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body_headers: Mapping[str, str],
    content: bytes | None,
    auth: httpx2.BasicAuth | None,
) -> httpx2.Response:
    """Send the request and follow its redirects; the last response, open.

    *headers* (the configured ones) and *auth* go only to *url*'s origin (scheme, host
    and port): from the first redirect to another origin on, no hop carries them.
    *body_headers* describe *content* and go wherever it goes (307 and 308 resend it;
    a redirect that turns the request into a ``GET`` drops both).
    """
    home = _origin(httpx2.URL(url))
    trusted = True
    target: httpx2.URL | str = url
    limit = client.max_redirects
    for hop in range(limit + 1):
        sent = {**headers, **body_headers} if trusted else dict(body_headers)
        request = client.build_request(method, target, headers=sent, content=content)
        response = await client.send(
            request,
            stream=True,
            follow_redirects=False,
            auth=auth if trusted else None,
        )
        if not response.has_redirect_location:
            return response
        await close_response(response)  # a redirect's own body is never read
        location = response.headers["location"]
        try:
            target = response.url.join(location)
        except httpx2.InvalidURL as exc:
            raise httpx2.RemoteProtocolError(
                f"invalid redirect location {location!r}", request=request
            ) from exc
        if target.scheme not in ("http", "https"):
            raise httpx2.UnsupportedProtocol(
                f"a redirect to a {target.scheme!r} URL is not followed", request=request
            )
        if hop == limit:
            raise httpx2.TooManyRedirects(f"more than {limit} redirects", request=request)
        new_method = _redirect_method(method, response.status_code)
        if new_method != method and new_method == "GET":
            content, body_headers = None, {}
        method = new_method
        trusted = trusted and _origin(target) == home
    raise AssertionError("unreachable")  # the loop returns or raises


def _default_schema(names: Sequence[str], query: Sequence[str]) -> JSONSchema:
    scalar: JSONSchema = {"type": ["string", "number", "boolean"]}
    properties = {n: dict(scalar) for n in [*names, *query]}
    schema: JSONSchema = {"type": "object", "properties": properties}
    if names:
        schema["required"] = list(names)
    schema["additionalProperties"] = False
    return schema


def http_tool(
    *,
    name: str,
    description: str,
    method: str,
    url: str,
    headers: Mapping[str, str] | None = None,
    query: Sequence[str] = (),
    body: BodyMode = "json",
    input_schema: JSONSchema | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    result_mode: ResultMode = "text",
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    http_client: httpx2.AsyncClient | None = None,
) -> Tool:
    """Declare an HTTP endpoint as a tool (``source=ToolSource.HTTP``, SPEC §7).

    - ``url``: an absolute http(s) URL; ``{name}`` placeholders in its path or query
      take the argument of that name, URL-encoded (``/`` too). A missing argument is an
      error result, and so is ``.`` or ``..`` in the path. A placeholder elsewhere (the
      host) is refused with :class:`ValueError`, so a model cannot pick the server.
    - ``query``: argument names sent as the query string. The other arguments (not
      used by a placeholder) are the body: ``"json"`` (compact, UTF-8), ``"form"``
      (urlencoded), or ``"raw"`` (the ``body`` argument, sent as text). A ``GET`` or
      ``HEAD`` has no body: its other arguments join the query string. Values: ``null``
      is left out, a list repeats the key, ``true``/``false`` and numbers as in JSON.
    - ``headers``: static headers; ``${VAR}`` in a value is read from the environment
      at each call (unset: empty, with a warning naming the variable). Header values are
      never logged, and are redacted from error results.
    - ``input_schema``: the arguments' JSON Schema. Without it, one is made from the
      placeholders (required) and the ``query`` names. With it, each placeholder must be
      one of its ``properties``.
    - ``timeout_ms`` (default 30000; ``0``: none) bounds the whole call, connect to
      last byte: ``timed out after <N>ms``. A cancel aborts the request on the socket.
    - Results: a 2xx answer gives the body text (``result_mode="json"``: re-encoded as
      compact JSON, a body that is not JSON as a JSON string; ``"status+text"``:
      ``"<status>\\n<body>"``) with ``metadata={"status": <status>}``. A body past
      ``max_response_bytes`` (default 1 MiB) is cut there with a
      ``[truncated: ...]`` line (``json`` mode: an error). Any other status is the error
      ``HTTP <status>: <body>``, the body cut to 2000 characters. A network failure is
      the error ``<METHOD> <url> failed: <error>`` (a refused connection names the
      host, the port and the operating system's reason).
    - Redirects are followed (at most 20), but the configured ``headers`` (and
      credentials written in ``url``, sent as basic auth) go to ``url``'s own origin
      only: a redirect to another scheme, host or port is followed without any of
      them, and so is every hop after it.
    - ``http_client``: an ``httpx2.AsyncClient`` you own, to pool connections (never
      closed here; its own ``follow_redirects`` is not used, its ``max_redirects``
      is); without it each call uses a client of its own.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(f"http_tool name must match [a-zA-Z0-9_-]{{1,128}}, not {name!r}")
    verb = method.upper()
    if not _METHOD.fullmatch(verb):
        raise ValueError(f"http_tool method must be an HTTP method name, not {method!r}")
    if body not in ("json", "form", "raw"):
        raise ValueError(f"http_tool body must be 'json', 'form' or 'raw', not {body!r}")
    if result_mode not in ("text", "json", "status+text"):
        raise ValueError(
            f"http_tool result_mode must be 'text', 'json' or 'status+text', not {result_mode!r}"
        )
    if timeout_ms < 0 or max_response_bytes < 1:
        raise ValueError("http_tool: timeout_ms must be >= 0 and max_response_bytes >= 1")
    if isinstance(query, str):
        raise TypeError("http_tool query is a list of argument names, not one string")
    template = _Template(url)
    query_names = list(query)
    if input_schema is None:
        input_schema = _default_schema(template.names, query_names)
    else:
        declared = input_schema.get("properties")
        if isinstance(declared, Mapping):
            for ph in template.names:
                if ph not in declared:
                    raise ValueError(
                        f"http_tool url placeholder {{{ph}}} is not a property of input_schema"
                    )
    static_headers = dict(headers or {})
    used = set(template.names)
    scope_s = timeout_ms / 1000 if timeout_ms > 0 else math.inf

    auth = httpx2.BasicAuth(*template.credentials) if template.credentials else None
    url_hidden = url_secrets(url)

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        secrets: list[str] = list(url_hidden)
        sent_headers = {k: _expand(v, secrets) for k, v in static_headers.items()}
        for key, value in sent_headers.items():
            if any(c in value for c in "\r\n\0"):
                return ToolResult.error(f"header {key!r}: the value has a line break or NUL")
        try:
            target = template.fill(args)
        except ValueError as exc:
            return ToolResult.error(str(exc))
        params: list[tuple[str, str]] = []
        for q in query_names:
            params += _pairs(q, args.get(q))
        rest = {k: v for k, v in args.items() if k not in used and k not in query_names}
        content: bytes | None = None
        content_type: str | None = None
        if verb in _QUERY_METHODS:
            for key, value in rest.items():
                params += _pairs(key, value)
        elif body == "json" and rest:
            content = json.dumps(rest, separators=(",", ":"), ensure_ascii=False).encode()
            content_type = "application/json"
        elif body == "form" and rest:
            form: list[tuple[str, str]] = []
            for key, value in rest.items():
                form += _pairs(key, value)
            content = urlencode(form).encode("ascii")
            content_type = "application/x-www-form-urlencoded"
        elif body == "raw" and rest.get("body") is not None:
            raw = rest["body"]
            content = (raw if isinstance(raw, str) else _text(raw)).encode()
            content_type = "text/plain; charset=utf-8"
        body_headers: dict[str, str] = {}
        if content_type is not None and not any(k.lower() == "content-type" for k in sent_headers):
            body_headers["Content-Type"] = content_type
        with trio.move_on_after(scope_s) as scope:
            return await _send(verb, target, params, sent_headers, body_headers, content, secrets)
        assert scope.cancelled_caught
        return ToolResult.error(f"timed out after {timeout_ms}ms")

    async def _send(
        verb: str,
        target: str,
        params: list[tuple[str, str]],
        sent_headers: dict[str, str],
        body_headers: dict[str, str],
        content: bytes | None,
        secrets: list[str],
    ) -> ToolResult:
        # No timeouts of httpx2's: the tool's own cancel scope bounds the whole call.
        client = http_client if http_client is not None else await new_client()
        try:
            try:
                if params:  # appended by hand: httpx2 would replace the URL's own query
                    target += ("&" if "?" in target else "?") + urlencode(params)
                response = await _exchange(
                    client, verb, target, sent_headers, body_headers, content, auth
                )
            except httpx2.HTTPError as exc:
                detail = redact(error_text(exc), secrets)
                return ToolResult.error(f"{verb} {target} failed: {type(exc).__name__}: {detail}")
            try:
                return await _result(response, secrets)
            except httpx2.HTTPError as exc:
                detail = redact(error_text(exc), secrets)
                return ToolResult.error(
                    f"{verb} {target} failed while reading: {type(exc).__name__}: {detail}"
                )
            finally:
                await close_response(response)
        finally:
            if http_client is None:
                with trio.move_on_after(_CLOSE_GRACE, shield=True):
                    await client.aclose()

    async def _result(response: httpx2.Response, secrets: list[str]) -> ToolResult:
        status = response.status_code
        meta: dict[str, Any] = {"status": status}
        if not response.is_success:
            data, more = await _read(response, _ERROR_READ_BYTES)
            text = data.decode(_charset(response), "replace")
            if more or len(text) > ERROR_BODY_CHARS:
                text = text[:ERROR_BODY_CHARS] + "…"
            return ToolResult.error(f"HTTP {status}: {redact(text, secrets)}", meta)
        data, more = await _read(response, max_response_bytes)
        # An incremental decode drops a character cut in half at the limit.
        text = codecs.getincrementaldecoder(_charset(response))("replace").decode(data, not more)
        if result_mode == "json":
            if more:
                return ToolResult.error(
                    f"HTTP {status}: the JSON body is larger than {max_response_bytes} bytes",
                    meta,
                )
            try:
                parsed: Any = json.loads(text)
            except ValueError:
                parsed = text
            text = json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
        elif more:
            text += f"\n[truncated: the response is larger than {max_response_bytes} bytes]"
            meta["truncated"] = True
        if result_mode == "status+text":
            text = f"{status}\n{text}"
        return ToolResult.ok(text, meta)

    return Tool(
        name=name,
        description=description,
        input_schema=input_schema,
        source=ToolSource.HTTP,
        execute=execute,
    )
