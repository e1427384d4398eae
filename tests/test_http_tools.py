"""HTTP tools (SPEC §7) against a real loopback server: requests, results, bad input,
timeouts and cancellation."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx2
import pytest
import trio
from http_tool_server import Reply, Seen, by_path, open_server

from toolnexus_trio import (
    BuiltinsConfig,
    CancelToken,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    ToolContext,
    ToolkitOptions,
    ToolSource,
    create_in_process_client,
    create_toolkit,
    http_tool,
)

ANY: dict[str, Any] = {"type": "object"}


def tool(url: str, **kw: Any) -> Any:
    kw.setdefault("method", "GET")
    kw.setdefault("input_schema", ANY)
    return http_tool(name="api", description="an endpoint", url=url, **kw)


async def test_placeholders_are_url_encoded_and_the_rest_goes_to_the_query() -> None:
    async with open_server() as server:
        t = tool(server.url + "/items/{id}/{sub}?fixed=1&k={key}", query=["q", "tags"])
        result = await t.call(
            {"id": "a b/c?d#e", "sub": 7, "key": "x&y", "q": "p q", "tags": ["a", "b"],
             "flag": True, "none": None, "obj": {"k": 1}}
        )  # fmt: skip
    assert not result.is_error, result.output
    seen = server.requests[0]
    assert seen.method == "GET"
    path, query = seen.target.split("?", 1)
    assert path == "/items/a%20b%2Fc%3Fd%23e/7"
    assert query == "fixed=1&k=x%26y&q=p+q&tags=a&tags=b&flag=true&obj=%7B%22k%22%3A1%7D"
    assert seen.body == b""
    assert result.metadata == {"status": 200}
    assert t.source is ToolSource.HTTP


async def test_post_sends_the_other_arguments_as_compact_json() -> None:
    async with open_server() as server:
        t = tool(server.url + "/items/{id}", method="post", query=["v"])
        result = await t.call({"id": 3, "v": 1, "title": "café", "tags": [1, None]})
    assert not result.is_error
    seen = server.requests[0]
    assert (seen.method, seen.target) == ("POST", "/items/3?v=1")
    assert seen.headers["content-type"] == "application/json"
    assert seen.body == '{"title":"café","tags":[1,null]}'.encode()


async def test_post_without_body_arguments_sends_no_body() -> None:
    async with open_server() as server:
        await tool(server.url + "/x/{id}", method="DELETE").call({"id": "1"})
    seen = server.requests[0]
    assert (seen.method, seen.body) == ("DELETE", b"")
    assert "content-type" not in seen.headers


async def test_form_and_raw_bodies() -> None:
    async with open_server() as server:
        await tool(server.url + "/f", method="POST", body="form").call(
            {"a": "1 2", "b": False, "c": None, "d": ["x", "y"]}
        )
        await tool(server.url + "/r", method="PUT", body="raw").call({"body": "RAW\n", "x": 1})
        await tool(
            server.url + "/r", method="PUT", body="raw", headers={"Content-Type": "text/csv"}
        ).call({"body": "a,b"})
    form, raw, csv = server.requests
    assert form.headers["content-type"] == "application/x-www-form-urlencoded"
    assert form.body == b"a=1+2&b=false&d=x&d=y"
    assert raw.headers["content-type"] == "text/plain; charset=utf-8"
    assert raw.body == b"RAW\n"
    assert (csv.headers["content-type"], csv.body) == ("text/csv", b"a,b")


async def test_env_headers_expand_and_are_never_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TNX_TOKEN", "s3cret-value")
    monkeypatch.delenv("TNX_UNSET", raising=False)
    caplog.set_level(logging.DEBUG)
    async with open_server() as server:
        t = tool(
            server.url + "/h",
            headers={"Authorization": "Bearer ${TNX_TOKEN}", "X-Other": "a${TNX_UNSET}b"},
        )
        result = await t.call({})
    seen = server.requests[0]
    assert seen.headers["authorization"] == "Bearer s3cret-value"
    assert seen.headers["x-other"] == "ab"
    assert "s3cret-value" not in caplog.text
    assert "TNX_UNSET" in caplog.text  # the name of a missing variable is worth a warning
    assert not result.is_error


async def test_an_env_value_echoed_in_an_error_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TNX_TOKEN", "s3cret-value")

    async def reject(seen: Seen) -> Reply:
        return Reply(401, f"bad token {seen.headers['x-key']}".encode())

    async with open_server(reject) as server:
        result = await tool(server.url + "/a", headers={"X-Key": "${TNX_TOKEN}"}).call({})
    assert result.is_error
    assert result.output == "HTTP 401: bad token [redacted]"


async def test_an_env_value_with_a_line_break_is_refused_without_showing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TNX_TOKEN", "abc\r\nX-Injected: 1")
    async with open_server() as server:
        result = await tool(server.url + "/a", headers={"X-Key": "${TNX_TOKEN}"}).call({})
    assert result.is_error
    assert "abc" not in result.output and "line break" in result.output
    assert server.requests == []


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (404, b"no such item", "HTTP 404: no such item"),
        (500, b"", "HTTP 500: "),
        (302, b"moved", "HTTP 302: moved"),
        (503, "caf\xe9".encode("latin-1"), "HTTP 503: caf\ufffd"),
    ],
)
async def test_non_2xx_is_an_error_result(status: int, body: bytes, expected: str) -> None:
    async with open_server(by_path({"/e": Reply(status, body)})) as server:
        result = await tool(server.url + "/e").call({})
    assert result.is_error
    assert result.output == expected
    assert result.metadata == {"status": status}


async def test_a_huge_error_body_is_cut_and_not_read_whole() -> None:
    chunk = b"x" * 65536
    async with open_server(by_path({"/e": Reply(500, chunk, chunks=1000)})) as server:
        result = await tool(server.url + "/e").call({})
        seen = server.requests[0]
        with trio.fail_after(10):
            await seen.closed.wait()
    assert result.output == "HTTP 500: " + "x" * 2000 + "…"
    assert seen.bytes_sent < 100 * len(chunk)  # the client hung up long before 64 MB


async def test_a_huge_2xx_body_is_truncated_with_a_marker() -> None:
    chunk = "é".encode() * 1000  # 2000 bytes, a character never split at the cap
    async with open_server(by_path({"/b": Reply(200, chunk, chunks=10_000)})) as server:
        result = await tool(server.url + "/b", max_response_bytes=5001).call({})
        with trio.fail_after(10):
            await server.requests[0].closed.wait()
    assert not result.is_error
    text, marker = result.output.rsplit("\n", 1)
    assert text == "é" * 2500  # 5000 bytes; the half character at byte 5001 is dropped
    assert marker == "[truncated: the response is larger than 5001 bytes]"
    assert result.metadata == {"status": 200, "truncated": True}


async def test_result_modes() -> None:
    routes = {
        "/j": Reply(200, b'{ "b": 1, "u": "\\u00e9" }', "application/json"),
        "/t": Reply(200, b"not json"),
        "/n": Reply(204),
    }
    async with open_server(by_path(routes)) as server:
        as_json = await tool(server.url + "/j", result_mode="json").call({})
        text_json = await tool(server.url + "/t", result_mode="json").call({})
        status = await tool(server.url + "/j", result_mode="status+text").call({})
        empty = await tool(server.url + "/n").call({})
    assert as_json.output == '{"b":1,"u":"é"}'
    assert text_json.output == '"not json"'
    assert status.output == '200\n{ "b": 1, "u": "\\u00e9" }'
    assert (empty.output, empty.is_error, empty.metadata) == ("", False, {"status": 204})


async def test_redirects_are_followed() -> None:
    routes = {"/old": Reply(301, b"", headers=(("location", "/new"),))}
    async with open_server(by_path(routes)) as server:
        result = await tool(server.url + "/old").call({})
    assert [s.target for s in server.requests] == ["/old", "/new"]
    assert json.loads(result.output)["target"] == "/new"


SECRET_HEADERS = {"X-Api-Key": "${HTTP_TOOL_KEY}", "Authorization": "Bearer ${HTTP_TOOL_KEY}"}
CONFIGURED = {"x-api-key", "authorization"}


def to(url: str, status: int = 302) -> Reply:
    return Reply(status, b"", headers=(("location", url),))


async def test_a_redirect_to_another_origin_carries_none_of_the_configured_headers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two loopback servers on two ports: two origins. The configured headers go to the
    tool's own origin only, and not to any hop after the chain has left it."""
    monkeypatch.setenv("HTTP_TOOL_KEY", "k-7f31-secret")
    async with open_server() as other, open_server() as home:
        routes = {
            "/start": to("/moved"),  # same origin: the headers go along
            "/moved": to(other.url + "/away"),
            "/back": Reply(200, b"home again"),
        }
        home.handler = by_path(routes)
        other.handler = by_path({"/away": to(home.url + "/back")})
        t = tool(home.url + "/start", headers=SECRET_HEADERS)
        result = await t.call({})
    assert (result.is_error, result.output) == (False, "home again")
    assert [s.target for s in home.requests] == ["/start", "/moved", "/back"]
    start, moved, back = home.requests
    assert start.headers["x-api-key"] == moved.headers["x-api-key"] == "k-7f31-secret"
    assert moved.headers["authorization"] == "Bearer k-7f31-secret"
    (away,) = other.requests
    assert not CONFIGURED & away.headers.keys()
    assert not CONFIGURED & back.headers.keys()  # the chain left home once: no way back


async def test_a_307_to_another_origin_resends_the_body_without_the_headers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_TOOL_KEY", "k-7f31-secret")
    async with open_server() as other:
        redirect = by_path({"/post": to(other.url + "/took", 307)})
        async with open_server(redirect) as home:
            t = tool(home.url + "/post", method="POST", headers=SECRET_HEADERS)
            result = await t.call({"a": 1})
    assert not result.is_error
    (took,) = other.requests
    assert (took.method, took.body, took.headers["content-type"]) == (
        "POST",
        b'{"a":1}',
        "application/json",
    )
    assert not CONFIGURED & took.headers.keys()


async def test_url_credentials_are_basic_auth_for_the_origin_only() -> None:
    async with open_server() as other:
        redirect = by_path({"/x": to(other.url + "/y")})
        async with open_server(redirect) as home:
            url = home.url.replace("http://", "http://bob:pw%2Fsecret@") + "/x"
            result = await tool(url).call({})
    assert not result.is_error
    assert home.requests[0].headers["authorization"] == "Basic Ym9iOnB3L3NlY3JldA=="
    assert "authorization" not in other.requests[0].headers
    # Never shown: not in a network error, not in a refused declaration.
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    refused = await tool(f"http://bob:pw%2Fsecret@127.0.0.1:{port}/x").call({})
    assert refused.output.startswith(f"GET http://127.0.0.1:{port}/x failed: ConnectError: ")
    with pytest.raises(ValueError) as bad:
        tool("http://bob:pw%2Fsecret@h/{unclosed")
    assert "bob:[redacted]@h" in str(bad.value)
    for shown in (refused.output, str(bad.value)):
        assert "pw%2Fsecret" not in shown and "pw/secret" not in shown


async def test_a_redirect_to_another_scheme_or_a_loop_is_an_error() -> None:
    routes = {
        "/file": to("file:///etc/passwd"),
        "/ws": to("ws://127.0.0.1:9/"),
        "/loop": to("/loop"),
    }
    async with open_server(by_path(routes)) as server:
        to_file = await tool(server.url + "/file").call({})
        to_ws = await tool(server.url + "/ws").call({})
        looping = await tool(server.url + "/loop").call({})
    assert to_file.output == (
        f"GET {server.url}/file failed: UnsupportedProtocol: "
        "a redirect to a 'file' URL is not followed"
    )
    assert to_ws.is_error and "'ws'" in to_ws.output
    assert looping.output == (
        f"GET {server.url}/loop failed: TooManyRedirects: more than 20 redirects"
    )
    assert len(server.requests) == 2 + 21


async def test_missing_placeholder_and_dot_segments_are_error_results() -> None:
    async with open_server() as server:
        t = tool(server.url + "/items/{id}?x={x}")
        missing = await t.call({"x": "1"})
        null = await t.call({"id": None, "x": "1"})
        dots = await t.call({"id": "..", "x": "1"})
        dots_in_query = await t.call({"id": "ok", "x": ".."})
    assert missing.is_error
    assert missing.output == "missing argument 'id' for the URL placeholder {id}"
    assert null.output == missing.output
    assert dots.output == "argument 'id' may not be '..' in a URL path"
    assert not dots_in_query.is_error
    assert [s.target for s in server.requests] == ["/items/ok?x=.."]


def test_bad_declarations_are_refused_when_the_tool_is_made() -> None:
    with pytest.raises(ValueError, match="not a property of input_schema"):
        http_tool(
            name="a", description="", method="GET", url="http://h/{id}",
            input_schema={"type": "object", "properties": {"other": {}}},
        )  # fmt: skip
    cases: list[dict[str, Any]] = [
        {"url": "http://{host}/x"},
        {"url": "ftp://h/x"},
        {"url": "/relative"},
        {"url": "http://h/{unclosed"},
        {"url": "http://h/x#frag"},
        {"url": "http://h/x", "method": "GE T"},
        {"url": "http://h/x", "name": "bad name"},
        {"url": "http://h/x", "body": "xml"},
        {"url": "http://h/x", "result_mode": "yaml"},
        {"url": "http://h/x", "timeout_ms": -1},
        {"url": "http://h/x", "max_response_bytes": 0},
    ]
    for case in cases:
        case.setdefault("name", "a")
        case.setdefault("method", "GET")
        with pytest.raises(ValueError):
            http_tool(description="", **case)
    with pytest.raises(TypeError):
        http_tool(name="a", description="", method="GET", url="http://h/", query="q")


async def test_the_default_schema_comes_from_the_placeholders_and_query() -> None:
    t = http_tool(name="a", description="", method="GET", url="http://h/{id}", query=["q"])
    scalar = {"type": ["string", "number", "boolean"]}
    assert t.input_schema == {
        "type": "object",
        "properties": {"id": scalar, "q": scalar},
        "required": ["id"],
        "additionalProperties": False,
    }
    refused = await t.call({"q": "x"})
    assert refused.is_error and "Invalid arguments" in refused.output


async def test_a_network_failure_is_an_error_result() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    result = await tool(f"http://127.0.0.1:{port}/x").call({})
    assert result.is_error
    assert result.output == (
        f"GET http://127.0.0.1:{port}/x failed: "
        f"ConnectError: cannot connect to 127.0.0.1:{port}: Connection refused"
    )


async def test_timeout_aborts_the_request(socket_autojump_clock: trio.testing.MockClock) -> None:
    async with open_server(by_path({"/slow": Reply(stall=True)})) as server:
        started = trio.current_time()
        result = await tool(server.url + "/slow", timeout_ms=500).call({})
        assert trio.current_time() - started == pytest.approx(0.5, abs=0.1)
        with trio.fail_after(5):
            await server.requests[0].closed.wait()
    assert (result.is_error, result.output) == (True, "timed out after 500ms")


async def test_cancel_aborts_the_request_and_the_server_sees_the_close() -> None:
    async with open_server(by_path({"/slow": Reply(stall=True)})) as server:
        t = tool(server.url + "/slow")
        ctx = ToolContext(cancel=CancelToken())

        async def cancel_on_arrival() -> None:
            await server.arrived.wait()
            ctx.cancel.cancel("user stopped it")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_on_arrival)
            result = await t.call({}, ctx)
        with trio.fail_after(5):
            await server.requests[0].closed.wait()
    assert (result.is_error, result.output) == (True, "cancelled")


async def test_an_enclosing_cancel_scope_propagates_and_closes_the_connection() -> None:
    async with open_server(by_path({"/slow": Reply(stall=True)})) as server:
        t = tool(server.url + "/slow")
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def cancel_on_arrival() -> None:
                    await server.arrived.wait()
                    scope.cancel()

                nursery.start_soon(cancel_on_arrival)
                await t.call({})
                pytest.fail("the call should have been cancelled")  # pragma: no cover
        assert scope.cancelled_caught
        with trio.fail_after(5):
            await server.requests[0].closed.wait()


async def test_a_shared_http_client_is_used_and_left_open() -> None:
    async with open_server() as server, httpx2.AsyncClient() as client:
        t = tool(server.url + "/x", http_client=client, headers={"X-A": "1"})
        first = await t.call({})
        second = await t.call({})
        assert not client.is_closed
    assert not first.is_error and not second.is_error
    assert len(server.requests) == 2


async def test_an_http_tool_in_the_loop_reports_its_status() -> None:
    async with open_server(by_path({"/w/Paris": Reply(200, b"Sunny")})) as server:
        weather = http_tool(
            name="weather", description="Weather for a city", method="GET",
            url=server.url + "/w/{city}",
        )  # fmt: skip

        async def generate(req: GenerateRequest) -> InProcessResponse:
            if any(m["role"] == "tool" for m in req.messages):
                return InProcessResponse(content="done")
            return InProcessResponse(
                tool_calls=[InProcessToolCall(name="weather", arguments={"city": "Paris"})]
            )

        options = ToolkitOptions(extra_tools=[weather], builtins=BuiltinsConfig.off())
        async with await create_toolkit(options) as toolkit:
            client = create_in_process_client(InProcessOptions(model="m", generate=generate))
            result = await client.run("weather?", toolkit)
    record = result.tool_calls[0]
    assert (record.output, record.is_error, record.metadata) == ("Sunny", False, {"status": 200})
