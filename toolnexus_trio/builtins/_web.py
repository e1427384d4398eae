"""The ``webfetch`` builtin: one HTTP GET on httpx2, bounded in time and size.

Only ``http`` and ``https`` URLs are fetched (``file://`` and every other scheme are
refused). The whole call, redirects included, is bounded by ``timeout`` (seconds,
default 30); a body over :data:`MAX_FETCH_BYTES` is refused; a non-2xx answer gives
``HTTP <status>``. ``text`` and ``markdown`` both strip the tags, scripts and styles
from the body, as the released ports do; ``html`` returns the body as is. The body is
decoded with the charset its ``Content-Type`` declares (UTF-8 when none is declared),
bad bytes replaced.

A cancel aborts the request on the socket at once (httpx2 on Trio). The conversion to
text is linear in the body's length (:func:`strip_html`) and runs in a worker thread,
under the same ``timeout``: a cancel or the timeout returns at once, and the abandoned
thread stops at its next step.
"""

from __future__ import annotations

import codecs
import math
import re
import threading
import urllib.parse
from typing import TYPE_CHECKING, Any, Final

import trio

from .._tools import Tool, ToolContext, ToolResult
from .._version import __version__
from ._config import BuiltinError, builtin, required

if TYPE_CHECKING:
    import httpx2  # imported by the first fetch (issue 39: start-up)

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

# strip_html gives exactly what the released ports' five substitutions give:
#
#     <script[^>]*>.*?</script>  (IGNORECASE, DOTALL) -> ""
#     <style[^>]*>.*?</style>    (the same)           -> ""
#     <[^>]+>                                         -> ""
#     [ \t]+\n                                        -> "\n"
#     \n{3,}                                          -> "\n\n"
#
# but in linear time: on hostile input ("<script>" or "<" repeated, a long run of
# spaces) each of those backtracks from every start position to the end of the text,
# which is quadratic (a 96 KiB page took 4.7 s; 5 MiB would take hours). Each pass
# below reads the text once, left to right; the regular expressions left in it are
# literal searches or patterns that cannot rescan (see each pass).
_SCRIPT_OPEN = re.compile("<script", re.IGNORECASE)
_SCRIPT_CLOSE = re.compile("</script>", re.IGNORECASE)
_STYLE_OPEN = re.compile("<style", re.IGNORECASE)
_STYLE_CLOSE = re.compile("</style>", re.IGNORECASE)
# "<" with at least one character before the first ">" after it. Only applied to the
# text up to its last ">", where every "<" has a ">" after it: an attempt either
# matches through that ">" or fails at once on "<>", so no position is read twice.
_TAG = re.compile("<[^>]+>")
# A run of spaces and tabs before a newline. The lookbehind starts an attempt only at
# the beginning of a run and the possessive run never gives back, so each run is read
# once (the ports' "[ \t]+\n" retried from every position of a long run).
_SPACE_BEFORE_NEWLINE = re.compile("(?<![ \t])[ \t]++\n")
_BLANK_RUN = re.compile("\n{3,}")  # a failed attempt reads at most three characters


class _Stopped(Exception):
    """The conversion's caller went away (its call was cancelled or timed out)."""


def _check(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise _Stopped


def _drop_blocks(
    text: str, opening: re.Pattern[str], closing: re.Pattern[str], stop: threading.Event | None
) -> str:
    """Remove each ``<name ...>...</name>`` block, as ``<name[^>]*>.*?</name>`` would.

    The regex's match at an opening tag ends at the first ``</name>`` after the first
    ``>`` after it. When an opening tag has no such ``>`` or no such closing tag, no
    later one has either, so the pass ends there instead of retrying each of them.
    """
    found = opening.search(text)
    if found is None:
        return text
    kept: list[str] = []
    start = 0
    while found is not None:
        _check(stop)
        tag_end = text.find(">", found.end())
        if tag_end < 0:
            break
        close = closing.search(text, tag_end + 1)
        if close is None:
            break
        kept.append(text[start : found.start()])
        start = close.end()
        found = opening.search(text, start)
    kept.append(text[start:])
    return "".join(kept)


def _strip(html: str, stop: threading.Event | None) -> str:
    text = _drop_blocks(html, _SCRIPT_OPEN, _SCRIPT_CLOSE, stop)
    text = _drop_blocks(text, _STYLE_OPEN, _STYLE_CLOSE, stop)
    _check(stop)
    last = text.rfind(">")  # no tag can end after the last ">"
    if last >= 0 and "<" in text:
        text = _TAG.sub("", text[: last + 1]) + text[last + 1 :]
    _check(stop)
    if " \n" in text or "\t\n" in text:  # (a fast scan first: most pages have neither)
        text = _SPACE_BEFORE_NEWLINE.sub("\n", text)
    _check(stop)
    if "\n\n\n" in text:
        text = _BLANK_RUN.sub("\n\n", text)
    return text.strip()


def strip_html(html: str) -> str:
    """Text of *html*: scripts, styles and tags removed, blank runs folded, trimmed.

    Byte-identical to the released ports' ``text``/``markdown`` output (entities are
    left as they are), in time linear in the length of *html* whatever it holds.
    """
    return _strip(html, None)


async def html_to_text(html: str) -> str:
    """:func:`strip_html` in a worker thread; a cancel returns at once and stops it."""
    stop = threading.Event()
    try:
        return await trio.to_thread.run_sync(_strip, html, stop, abandon_on_cancel=True)
    finally:
        stop.set()


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
    # The HTTP stack on the first fetch: a process that never fetches never loads it.
    import httpx2

    from .._http_client import (
        body_chunks,
        close_response,
        error_text,
        new_client,
        split_credentials,
    )

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
        timeout = max(timeout, 0.0)
        deadline = trio.current_time() + timeout
        status, body = await fetch(url, timeout)
        if body is None:
            return ToolResult.error(f"HTTP {status}", {"status": status})
        output = body
        if fmt != "html":
            with trio.move_on_at(deadline) as converting:  # part of the call's time
                output = await html_to_text(body)
            if converting.cancelled_caught:
                raise BuiltinError("timed out")
        return ToolResult.ok(output, {"status": status, "format": fmt})

    return builtin("webfetch", _DESCRIPTION, _schema, run)
