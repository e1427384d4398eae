"""``webfetch`` against a real loopback server: schemes, size cap, cancel, errors."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from builtin_helpers import open_route_server

from toolnexus_trio import ToolContext, ToolResult, create_toolkit
from toolnexus_trio.builtins import MAX_FETCH_BYTES, strip_html

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
