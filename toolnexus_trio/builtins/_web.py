"""The ``webfetch`` builtin: one HTTP GET on httpx2, bounded in time and size.

Only ``http`` and ``https`` URLs are fetched (``file://`` and every other scheme are
refused). The whole call, redirects included, is bounded by ``timeout`` (seconds,
default 30); a body over :data:`MAX_FETCH_BYTES` is refused; a non-2xx answer gives
``HTTP <status>``. ``text`` and ``markdown`` both strip the tags, scripts and styles
from the body, as the released ports do; ``html`` returns the body as is. The body is
decoded with the charset its ``Content-Type`` declares (UTF-8 when none is declared),
bad bytes replaced.

A cancel aborts the request on the socket at once (httpx2 on Trio).
"""

from __future__ import annotations

import codecs
import math
import re
import urllib.parse
from typing import Any, Final

import httpx2
import trio

from .._http_client import (
    body_chunks,
    close_response,
    error_text,
    new_client,
    split_credentials,
)
from .._tools import Tool, ToolContext, ToolResult
from .._version import __version__
from ._config import BuiltinError, builtin, required

MAX_FETCH_BYTES: Final = 5 * 1024 * 1024
"""The largest response body ``webfetch`` accepts (5 MiB)."""
DEFAULT_FETCH_TIMEOUT_SECONDS: Final = 30
_CONNECT_TIMEOUT: Final = 30.0

_schema: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "description": "URL to fetch"},
        "format": {
            "type": "string",
            "enum": ["text", "markdown", "html"],
            "description": "Response format (default markdown)",
        },
        "timeout": {"type": "number", "description": "Timeout in seconds (default 30)"},
    },
    "required": ["url"],
    "additionalProperties": False,
}

_DESCRIPTION = (
    "Fetch an http(s) URL with GET and return the body: as text (tags stripped) for "
    "`text` and `markdown` (the default), or the raw HTML for `html`. `timeout` is in "
    "seconds (default 30)."
)

_HEADERS: Final = {
    "User-Agent": f"toolnexus-trio/{__version__}",
    "Accept": "text/html,text/plain,text/markdown;q=0.9,*/*;q=0.8",
}

_SCRIPT = re.compile(r"<script[^>]*>.*?</script>", re.IGNORECASE | re.DOTALL)
_STYLE = re.compile(r"<style[^>]*>.*?</style>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_SPACE_BEFORE_NEWLINE = re.compile(r"[ \t]+\n")
_BLANK_RUN = re.compile(r"\n{3,}")


def strip_html(html: str) -> str:
    """Text of *html*: scripts, styles and tags removed, blank runs folded, trimmed.

    Byte-identical to the released ports' ``text``/``markdown`` output (entities are
    left as they are).
    """
    text = _STYLE.sub("", _SCRIPT.sub("", html))
    text = _TAG.sub("", text)
    text = _SPACE_BEFORE_NEWLINE.sub("\n", text)
    return _BLANK_RUN.sub("\n\n", text).strip()


def _charset(response: httpx2.Response) -> str:
    declared = response.charset_encoding
    if declared:
        try:
            return codecs.lookup(declared).name
        except LookupError:
            pass
    return "utf-8"


async def fetch(url: str, timeout_seconds: float) -> tuple[int, str | None]:
    """GET *url*: ``(status, body)``; the body is ``None`` for a non-2xx status.

    Raises :class:`BuiltinError` for a refused URL, a body that is too large, a
    timeout or a network failure (a refused connection names the host, the port and
    the operating system's reason).
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise BuiltinError(f"only http and https URLs can be fetched: {url}")
    with trio.move_on_after(timeout_seconds) as deadline:
        client = await new_client(connect_timeout=_CONNECT_TIMEOUT, follow_redirects=True)
        try:
            # Credentials in the URL go as basic auth (as httpx2 sends them), and so are
            # never in the URL that httpx2's log line shows.
            plain, credentials = split_credentials(url)
            auth = httpx2.BasicAuth(*credentials) if credentials else None
            request = client.build_request("GET", plain, headers=_HEADERS)
            try:
                response = await client.send(request, stream=True, auth=auth)
            except httpx2.HTTPError as exc:
                raise BuiltinError(error_text(exc)) from exc
            try:
                if not 200 <= response.status_code < 300:
                    return response.status_code, None
                length = response.headers.get("content-length", "")
                if length.isdigit() and int(length) > MAX_FETCH_BYTES:
                    raise BuiltinError(f"response body is larger than {MAX_FETCH_BYTES} bytes")
                chunks: list[bytes] = []
                size = 0
                async with body_chunks(response) as body:
                    async for chunk in body:
                        size += len(chunk)
                        if size > MAX_FETCH_BYTES:
                            raise BuiltinError(
                                f"response body is larger than {MAX_FETCH_BYTES} bytes"
                            )
                        chunks.append(chunk)
                return response.status_code, b"".join(chunks).decode(_charset(response), "replace")
            finally:
                await close_response(response)
        finally:
            with trio.move_on_after(1.0, shield=True):
                await client.aclose()
    assert deadline.cancelled_caught
    raise BuiltinError("timed out")


def webfetch_tool() -> Tool:
    """``webfetch {url, format?, timeout?}`` (see the module docs)."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        url = required(args, "url")
        fmt = args.get("format") or "markdown"
        timeout = float(args.get("timeout", DEFAULT_FETCH_TIMEOUT_SECONDS))
        if math.isnan(timeout):
            raise BuiltinError("timeout must be a number")
        status, body = await fetch(url, max(timeout, 0.0))
        if body is None:
            return ToolResult.error(f"HTTP {status}", {"status": status})
        output = body if fmt == "html" else strip_html(body)
        return ToolResult.ok(output, {"status": status, "format": fmt})

    return builtin("webfetch", _DESCRIPTION, _schema, run)
