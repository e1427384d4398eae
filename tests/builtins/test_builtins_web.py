"""``webfetch`` against a real loopback server: schemes, size cap, cancel, errors, and
the HTML conversion (the ports' exact output, in linear time, off the event loop)."""

from __future__ import annotations

import json
import re
import sys
import threading
from typing import Any

import pytest
import trio
from builtin_helpers import open_route_server
from hypothesis import given, settings
from hypothesis import strategies as st

from toolnexus_trio import ToolContext, ToolResult, create_toolkit
from toolnexus_trio.builtins import MAX_FETCH_BYTES, _web, strip_html

ROUTES: dict[str, dict[str, Any]] = {
    "/page": {"status": 200, "type": "text/html", "body": b"<p>Hi <b>there</b></p>"},
    "/chunked-big": {"status": 200, "body": b"x" * (MAX_FETCH_BYTES + 1), "chunked": True},
    "/exact": {"status": 200, "body": b"y" * MAX_FETCH_BYTES, "chunked": True},
    "/to-file": {"status": 302, "location": "file:///etc/hostname", "body": b""},
    "/hang": {"status": 200, "body": b"late", "delay": 30},
    "/teapot": {"status": 418, "body": b"short and stout"},
}


async def _fetch(args: dict[str, Any], ctx: ToolContext | None = None) -> ToolResult:
    toolkit = await create_toolkit()
    return await toolkit.execute("webfetch", args, ctx)


async def test_formats() -> None:
    async with open_route_server(ROUTES) as base:
        text = await _fetch({"url": base + "/page", "format": "text"})
        html = await _fetch({"url": base + "/page", "format": "html"})
    assert text == ToolResult.ok("Hi there", {"status": 200, "format": "text"})
    assert html == ToolResult.ok("<p>Hi <b>there</b></p>", {"status": 200, "format": "html"})


async def test_non_2xx_is_http_status_and_the_body_is_not_read() -> None:
    async with open_route_server(ROUTES) as base:
        result = await _fetch({"url": base + "/teapot"})
    assert result == ToolResult.error("HTTP 418", {"status": 418})


async def test_size_cap_holds_without_a_content_length() -> None:
    async with open_route_server(ROUTES) as base:
        too_big = await _fetch({"url": base + "/chunked-big", "format": "html"})
        exact = await _fetch({"url": base + "/exact", "format": "html"})
    assert too_big == ToolResult.error(
        f"webfetch: response body is larger than {MAX_FETCH_BYTES} bytes"
    )
    assert exact.output == "y" * MAX_FETCH_BYTES


@pytest.mark.parametrize(
    "url",
    ["file:///etc/hostname", "ftp://127.0.0.1/x", "data:text/plain,hi", "javascript:alert(1)",
     "http://", "/relative/path", "127.0.0.1:80/x"],
)  # fmt: skip
async def test_only_http_and_https(url: str) -> None:
    result = await _fetch({"url": url})
    assert result == ToolResult.error(f"webfetch: only http and https URLs can be fetched: {url}")


async def test_a_redirect_to_another_scheme_is_refused() -> None:
    async with open_route_server(ROUTES) as base:
        result = await _fetch({"url": base + "/to-file"})
    # The redirect target is refused by the transport, never fetched.
    assert result == ToolResult.error("webfetch: unsupported URL scheme 'file'")


async def test_timeout_and_cancel_abort_the_request() -> None:
    arrived = trio.Event()
    routes = {**ROUTES, "/hang-signalled": {**ROUTES["/hang"], "arrived": arrived}}
    async with open_route_server(routes) as base:
        with trio.fail_after(10):
            timed_out = await _fetch({"url": base + "/hang", "timeout": 0.2})
            ctx = ToolContext()
            results: list[ToolResult] = []

            async def call() -> None:
                results.append(await _fetch({"url": base + "/hang-signalled"}, ctx))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await arrived.wait()  # the request is on the server: cancel mid-request
                ctx.cancel.cancel()
    assert timed_out == ToolResult.error("webfetch: timed out")
    assert results == [ToolResult.error("cancelled")]


async def test_connection_refused_is_an_error_result() -> None:
    async with open_route_server({}) as base:
        dead = base  # the port closes with the server
    result = await _fetch({"url": dead + "/x", "timeout": 5})
    assert result.is_error and result.output.startswith("webfetch: ")


async def test_bad_arguments() -> None:
    assert (await _fetch({"url": ""})).output == "webfetch: url is required"
    bad_format = await _fetch({"url": "http://127.0.0.1/", "format": "pdf"})
    assert bad_format.is_error and "$.format" in bad_format.output
    nan = await _fetch({"url": "http://127.0.0.1/", "timeout": float("nan")})
    assert nan == ToolResult.error("webfetch: timeout must be a number")


def test_strip_html() -> None:
    assert strip_html("<script>a</script>b<script>c</script>") == "b"
    assert strip_html("a \t\n\t \n \tb<!-- c -->\n\n\n\n  c") == "a\n\n \tb\n\n  c"
    assert strip_html("1 < 2 > 0 &amp;") == "1  0 &amp;"


# -- the conversion ----------------------------------------------------------------------

# The released ports' conversion, verbatim: the reference strip_html must agree with.
_PORT_SUBSTITUTIONS = [
    (re.compile(r"<script[^>]*>.*?</script>", re.IGNORECASE | re.DOTALL), ""),
    (re.compile(r"<style[^>]*>.*?</style>", re.IGNORECASE | re.DOTALL), ""),
    (re.compile(r"<[^>]+>"), ""),
    (re.compile(r"[ \t]+\n"), "\n"),
    (re.compile(r"\n{3,}"), "\n\n"),
]


def _ports_strip_html(html: str) -> str:
    for pattern, replacement in _PORT_SUBSTITUTIONS:
        html = pattern.sub(replacement, html)
    return html.strip()


_PIECES = [
    "<script", "</script>", "<SCRIPT", "</Script>", "<style", "</style>", "</STYLE>",
    "<scriptx>", "</scriptx>", "<\u017fcript>", "</\u017fcript>", "<", ">", "<>", "</", "<b>",
    " ", "\t", "\n", "\r", "a", "x=1", "\u00e9", "<!-- c -->",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=16).map("".join))
def test_strip_html_is_the_ports_conversion(html: str) -> None:
    assert strip_html(html) == _ports_strip_html(html)


# Each of these makes one of the ports' regular expressions retry from every position
# to the end of the text (quadratic: hours at this size); with the scanner each is
# read once. The expected texts follow from the ports' rules.
_HOSTILE_PAGES = {  # name: (the page, as Python over N = the size cap; its text's length, head)
    "scripts": ('"<script>" * (N // 8)', 0, ""),
    "styles": ('"<style>" * (N // 7)', 0, ""),
    "openers before one close": ('"<script" * (N // 7) + "</script>"', 0, ""),
    "unclosed angles": ('"<" * N', MAX_FETCH_BYTES, "<" * 64),
    "spaces": ('" " * N + "x"', 1, "x"),
    "tabs before a newline": ('"a" + "\\t" * N + "\\nb"', 3, "a\nb"),
    "blocks": ('"<script></script>" * (N // 17)', 0, ""),
}

_HOSTILE_CHILD = """
import json, sys
from toolnexus_trio.builtins import MAX_FETCH_BYTES, strip_html
N = MAX_FETCH_BYTES
text = strip_html(eval(sys.argv[1]))
print(json.dumps([len(text), text[:64]]))
"""


@pytest.mark.parametrize("name", sorted(_HOSTILE_PAGES))
async def test_a_hostile_page_at_the_size_cap_converts(name: str) -> None:
    # In a child process: a quadratic conversion holds the GIL for hours, so nothing in
    # this process could even time it out. The guard is a hang guard, not a speed check.
    expression, length, head = _HOSTILE_PAGES[name]
    argv = [sys.executable, "-c", _HOSTILE_CHILD, expression]
    with trio.fail_after(120):
        done = await trio.run_process(argv, capture_stdout=True, check=False)
    assert done.returncode == 0
    assert json.loads(done.stdout) == [length, head]


@pytest.fixture
def gated_conversion(monkeypatch: pytest.MonkeyPatch) -> dict[str, threading.Event]:
    """The conversion blocks until its caller gives up (its stop flag is set)."""
    state = {"started": threading.Event(), "finished": threading.Event()}
    real = _web._strip

    def gated(html: str, stop: threading.Event | None) -> str:
        state["started"].set()
        assert stop is not None
        stop.wait(30)
        state["finished"].set()
        return real(html, stop)  # raises: the caller has gone

    monkeypatch.setattr(_web, "_strip", gated)
    return state


async def test_the_conversion_runs_off_the_loop_and_a_cancel_returns_at_once(
    gated_conversion: dict[str, threading.Event],
) -> None:
    ctx = ToolContext()
    results: list[ToolResult] = []
    ticks = 0
    async with open_route_server(ROUTES) as base:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:

                async def call() -> None:
                    results.append(await _fetch({"url": base + "/page"}, ctx))

                nursery.start_soon(call)
                await trio.to_thread.run_sync(gated_conversion["started"].wait, 10)
                for _ in range(3):  # the loop runs while the conversion is busy
                    await trio.lowlevel.checkpoint()
                    ticks += 1
                ctx.cancel.cancel()
    assert ticks == 3
    assert results == [ToolResult.error("cancelled")]
    assert await trio.to_thread.run_sync(gated_conversion["finished"].wait, 10)


async def test_the_timeout_bounds_the_conversion_too(
    gated_conversion: dict[str, threading.Event],
) -> None:
    async with open_route_server(ROUTES) as base:
        with trio.fail_after(20):
            result = await _fetch({"url": base + "/page", "timeout": 1})
    assert result == ToolResult.error("webfetch: timed out")
    assert gated_conversion["started"].is_set()
    assert await trio.to_thread.run_sync(gated_conversion["finished"].wait, 10)
