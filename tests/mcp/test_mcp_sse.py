"""SSE fallback for remote MCP servers (SPEC §2: streamable HTTP, "fall back to SSE if
needed"), against a real SDK server that speaks only the legacy HTTP+SSE transport on
loopback (hypercorn's Trio worker). A cancelled call must reach that server too."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp")

import trio
from mcp_helpers import build_everything, collecting_run, http_app, legacy_sse_app

from toolnexus_trio import CancelToken, ToolContext, ToolkitOptions, open_toolkit
from toolnexus_trio.mcp import McpStatus, list_mcp_tools, parse_mcp_config

SOME = {"slow": True, "seen_cancels": True, "progress": True, "grow": True, "extra": True}


async def wait_until(predicate: Any) -> None:
    """Poll state owned by the server side (no event to wait on); bounded."""
    with trio.fail_after(15):
        while not predicate():  # noqa: ASYNC110 - the state is on the other side of HTTP
            await trio.sleep(0.01)


async def cancel_mid_call(toolkit: Any, name: str, tag: str) -> Any:
    token = CancelToken()
    out: list[Any] = []

    async def call() -> None:
        out.append(await toolkit.execute(name, {"tag": tag}, ToolContext(cancel=token)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        # The server's handler has started (asked on the same session), then cancel.
        seen = f"{name.split('_')[0]}_seen_cancels"
        with trio.fail_after(15):
            while tag not in (await toolkit.execute(seen, {"started_calls": True})).output:  # noqa: ASYNC110 - the state is in the server process
                await trio.sleep(0.01)
        token.cancel()
    return out[0]


def raw_app(http: Any) -> Any:
    """A bare ASGI app: *http* answers each HTTP request; lifespan is acknowledged."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await http(scope, receive, send)
            return
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return

    return app


def test_type_picks_the_transport() -> None:
    servers = parse_mcp_config(
        {
            "inferred": {"url": "http://h/mcp"},
            "remote": {"type": "remote", "url": "http://h/mcp"},
            "http": {"type": "http", "url": "http://h/mcp"},
            "streamable": {"type": "streamable-http", "url": "http://h/mcp"},
            "sse": {"type": "sse", "url": "http://h/sse"},
            "local": {"command": "x"},
        }
    ).servers
    assert [(s.type, s.transport) for s in servers] == [
        ("remote", "auto"),
        ("remote", "auto"),
        ("remote", "streamable-http"),
        ("remote", "streamable-http"),
        ("remote", "sse"),
        ("local", "auto"),
    ]
    with pytest.raises(ValueError, match="url"):
        parse_mcp_config({"x": {"type": "sse", "command": "y"}})


async def test_a_legacy_sse_server_is_reached_by_fallback() -> None:
    server = build_everything("old")
    async with http_app(legacy_sse_app(server)) as base:
        config = {"old": {"url": f"{base}/sse", "tools": SOME}}
        async with open_toolkit(ToolkitOptions(mcp=config, builtins=False)) as toolkit:
            assert toolkit.mcp_status() == {"old": McpStatus("connected", None, 4)}
            with collecting_run() as (events, _):
                done = await toolkit.execute("old_progress", {"steps": 2})
            assert done.output == '{"result":"done 2"}'
            assert [e["progress"] for e in events] == [1.0, 2.0]

            # A cancelled call sends notifications/cancelled over the SSE session's POST
            # endpoint: the server's handler sees it; the session stays usable.
            assert (await cancel_mid_call(toolkit, "old_slow", "sse-cancel")).output == "cancelled"
            timed = await toolkit.execute(
                "old_slow", {"tag": "sse-timeout"}, ToolContext(timeout_ms=300)
            )
            assert timed.output == "timed out after 300ms"
            seen = await toolkit.execute("old_seen_cancels", {})
            assert seen.output == '{"result":"sse-cancel,sse-timeout"}'

            # list_changed arrives on the SSE stream
            await toolkit.execute("old_grow", {})
            await wait_until(lambda: toolkit.get("old_extra") is not None)


async def test_type_sse_connects_directly_and_http_does_not_fall_back() -> None:
    server = build_everything("old")
    async with http_app(legacy_sse_app(server)) as base:
        inventory = await list_mcp_tools(
            {
                "direct": {"type": "sse", "url": f"{base}/sse"},
                "pinned": {"type": "http", "url": f"{base}/sse"},
            }
        )
    assert inventory["direct"].status.state == "connected"
    assert "echo" in [t.name for t in inventory["direct"].tools]
    assert inventory["pinned"].status.state == "failed"


async def test_both_transports_refused_names_both() -> None:
    async def not_found(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with http_app(raw_app(not_found)) as base:
        inventory = await list_mcp_tools({"gone": {"url": f"{base}/mcp"}})
    status = inventory["gone"].status
    assert status.state == "failed"
    assert str(status.error).startswith(
        "streamable HTTP answered 404 (Not Found); SSE fallback: Client error '404"
    )


async def test_an_sse_server_that_never_sends_its_endpoint_fails_within_its_bound() -> None:
    # POST is refused (so we fall back), GET opens an event stream and says nothing.
    async def mute(scope: Any, receive: Any, send: Any) -> None:
        if scope["method"] == "POST":
            await send({"type": "http.response.start", "status": 405, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b": hi\n\n", "more_body": True})
        await trio.sleep_forever()

    async with http_app(raw_app(mute)) as base:
        inventory = await list_mcp_tools({"mute": {"url": f"{base}/sse", "timeout": 500}})
    assert inventory["mute"].status == McpStatus(
        "failed",
        "streamable HTTP answered 405 (Server returned an error response); "
        "SSE fallback: connect timed out after 500ms",
    )
