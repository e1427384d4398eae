"""The lean transport over TLS, and as the model client's default: retries of a dropped
kept-alive request, cookies, errors carrying their request, the proxy fallback."""

from __future__ import annotations

import json
import ssl
from typing import Any

import httpx2
import pytest
import trio
from http_helpers import served
from raw_http_server import Peer, answer_each, raw_server, response
from trio.abc import Clock

from toolnexus_trio import ClientOptions, ErrorInfo, create_client
from toolnexus_trio.models import _http
from toolnexus_trio.models._transport import Http1Transport

trustme = pytest.importorskip("trustme")


@pytest.fixture(scope="module")
def ca() -> Any:
    return trustme.CA()


def server_context(ca: Any, *names: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


def trusting(ca: Any) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


# -- TLS --------------------------------------------------------------------------


async def test_https_with_sni_alpn_verification_and_keep_alive(ca: Any) -> None:
    async with (
        raw_server(answer_each, tls=server_context(ca, "localhost"), host="127.0.0.1") as server,
        httpx2.AsyncClient(transport=Http1Transport(ssl_context=trusting(ca))) as client,
    ):
        url = f"https://localhost:{server.port}/v1"
        for _ in range(2):
            assert (await client.post(url, content=b"x")).content == b"ok"
    assert server.sni == ["localhost"]
    assert server.alpn == ["http/1.1"]  # offered h2 too: the client asks for http/1.1 only
    assert len(server.peers) == 1


@pytest.mark.parametrize("case", ["untrusted", "wrong name"])
async def test_a_certificate_that_does_not_verify_is_a_connect_error(ca: Any, case: str) -> None:
    names = ("localhost",) if case == "untrusted" else ("other.example",)
    client_context = ssl.create_default_context() if case == "untrusted" else trusting(ca)
    async with (
        raw_server(answer_each, tls=server_context(ca, *names)) as server,
        httpx2.AsyncClient(transport=Http1Transport(ssl_context=client_context)) as client,
    ):
        with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get(f"https://localhost:{server.port}/")
        assert server.requests == []


# -- as the model client's transport ------------------------------------------------

ANSWER = json.dumps(
    {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}]}
).encode()


async def test_the_model_client_owns_a_lean_pool_and_keeps_its_connection() -> None:
    async with served("openai", [{"text": "a"}, {"text": "b"}]) as (provider, client):
        assert (await client.run("one")).text == "a"
        assert (await client.run("two")).text == "b"
        poster = client._source.poster  # type: ignore[attr-defined]
        assert isinstance(poster._lean, Http1Transport)
        assert poster._lean.open_connections == 1
    assert len(provider.requests) == 2


async def test_a_kept_alive_request_dropped_unanswered_is_retried_by_the_client(
    socket_autojump_clock: Clock,
) -> None:
    """The transport does not resend it; the client's retry rules do (a network error)."""

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response(ANSWER, b"Content-Type: application/json"))
        if peer.index == 0:
            await peer.read_request()  # the next request is read, then the server hangs up
            return
        await answer_each(peer, response(ANSWER, b"Content-Type: application/json"))

    seen: list[ErrorInfo] = []

    def on_error(info: ErrorInfo) -> str:
        seen.append(info)
        return "retry"

    async with raw_server(handler) as server:
        options = ClientOptions(
            base_url=server.url + "/v1",
            style="openai",
            model="m",
            api_key="k",
            retry_base_ms=0,
            on_error=on_error,  # type: ignore[arg-type]
        )
        async with create_client(options) as client:
            assert (await client.run("one")).text == "hello"
            assert (await client.run("two")).text == "hello"
    assert len(seen) == 1 and seen[0].status is None and seen[0].attempt == 0
    assert isinstance(seen[0].error, httpx2.RemoteProtocolError)
    assert seen[0].error.request.url.path == "/v1/chat/completions"
    assert [len(p.requests) for p in server.peers] == [2, 1]


async def test_cookies_set_by_the_server_are_sent_back() -> None:
    async def handler(peer: Peer) -> None:
        cookie = b"Set-Cookie: session=abc; Path=/"
        await answer_each(peer, response(ANSWER, b"Content-Type: application/json", cookie))

    async with raw_server(handler) as server:
        options = ClientOptions(base_url=server.url + "/v1", style="openai", model="m", api_key="k")
        async with create_client(options) as client:
            await client.run("one")
            await client.run("two")
    assert [r.header(b"cookie") for r in server.requests] == [None, b"session=abc"]
    assert server.requests[1].header(b"authorization") == b"Bearer k"


async def test_an_environment_proxy_keeps_httpx2s_own_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "bypassed.example")
    proxied, lean = _http._new_pool("https://api.example/v1")
    bypassed, lean_too = _http._new_pool("https://bypassed.example/v1")
    direct, lean_also = _http._new_pool("http://api.example/v1")  # no proxy for http
    for client in (proxied, bypassed, direct):
        await client.aclose()
    assert lean is None
    assert isinstance(lean_too, Http1Transport) and isinstance(lean_also, Http1Transport)


async def test_a_closed_client_fails_its_next_call_clearly() -> None:
    async with served("openai", [{"text": "a"}, {"text": "b"}]) as (_, client):
        await client.run("one")
        await client.aclose()
        with pytest.raises(Exception, match="closed"):
            await client.run("two")
    await trio.lowlevel.checkpoint()


async def test_an_answer_cut_mid_body_is_retried_with_its_request_on_the_error() -> None:
    async def handler(peer: Peer) -> None:
        if peer.index == 0:
            await peer.read_request()
            await peer.send(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"choi')
            return  # and the connection ends
        await answer_each(peer, response(ANSWER, b"Content-Type: application/json"))

    seen: list[ErrorInfo] = []

    def on_error(info: ErrorInfo) -> str:
        seen.append(info)
        return "retry"

    async with raw_server(handler) as server:
        options = ClientOptions(
            base_url=server.url + "/v1", style="openai", model="m", api_key="k",
            retry_base_ms=0, on_error=on_error,  # type: ignore[arg-type]
        )  # fmt: skip
        async with create_client(options) as client:
            assert (await client.run("one")).text == "hello"
    assert len(seen) == 1 and isinstance(seen[0].error, httpx2.RemoteProtocolError)
    assert seen[0].error.request.url.path == "/v1/chat/completions"
    assert len(server.peers) == 2
