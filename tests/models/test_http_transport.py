"""The package's HTTP clients (one factory, httpx2's own transport) against loopback
servers that write raw bytes: what docs/real-models.rst "Connections" promises.

Keep-alive and stale connections, no resend by the transport, framing faults, cancel,
streaming, TLS verified by default, proxies from the environment, http(s) only.
"""

from __future__ import annotations

import json
import math
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import httpx2
import pytest
import trio
import trio.testing
from raw_http_server import Peer, answer_each, raw_server, response
from trio.abc import Clock

from toolnexus_trio import ClientOptions, ErrorInfo, GenerateError, create_client
from toolnexus_trio import _http_client as factory
from toolnexus_trio import _http_pool as direct

ANSWER = json.dumps(
    {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}]}
).encode()
JSON = b"Content-Type: application/json"


@asynccontextmanager
async def new_client(**kw: Any) -> AsyncIterator[httpx2.AsyncClient]:
    async with await factory.new_client(**kw) as client:
        yield client


def model(url: str, **kw: Any) -> ClientOptions:
    kw.setdefault("api_key", "k")
    return ClientOptions(base_url=url + "/v1", style="openai", model="m", **kw)


def recording(seen: list[ErrorInfo]) -> Any:
    """An ``on_error`` that keeps each failure and then does what the default would."""

    def on_error(info: ErrorInfo) -> str:
        seen.append(info)
        return "retry" if info.retryable else "fail"

    return on_error


async def closed_soon(peer: Peer) -> bool:
    """Whether the server saw the client hang up on *peer* (bounded wait)."""
    with trio.move_on_after(5):
        await peer.closed.wait()
    return peer.closed.is_set()


async def test_the_transport_never_redials_a_failed_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpcore2's ``retries`` (connect retries only) is left at its default, 0: a
    refused connect is tried once per address, and the error is the caller's."""
    dialled: list[tuple[str, int]] = []
    real = direct._connect

    async def recording(address: str, port: int, deadline: float = math.inf) -> Any:
        dialled.append((address, port))
        return await real(address, port, deadline)

    monkeypatch.setattr(direct, "_connect", recording)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]  # bound, not listening: refused
        async with new_client() as client:
            with pytest.raises(httpx2.ConnectError):
                await client.get(f"http://127.0.0.1:{port}/")
    assert dialled == [("127.0.0.1", port)]


# -- keep-alive -------------------------------------------------------------------


async def test_model_calls_share_one_kept_alive_connection() -> None:
    async with (
        raw_server(lambda peer: answer_each(peer, response(ANSWER, JSON))) as server,
        create_client(model(server.url)) as client,
    ):
        assert (await client.run("one")).text == "hello"
        assert (await client.run("two")).text == "hello"
    assert len(server.peers) == 1 and len(server.requests) == 2
    assert server.requests[0].line == b"POST /v1/chat/completions HTTP/1.1"


async def test_a_kept_alive_connection_the_server_closed_is_replaced_unseen() -> None:
    """Closed while idle: nothing was written on it, so another one is taken."""

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response(ANSWER, JSON))  # keep-alive as far as the client knows

    seen: list[ErrorInfo] = []
    async with (
        raw_server(handler) as server,
        create_client(model(server.url, on_error=recording(seen))) as client,
    ):
        await client.run("one")
        await trio.testing.wait_all_tasks_blocked()  # the server has closed its side
        assert (await client.run("two")).text == "hello"
    assert seen == []
    assert [len(p.requests) for p in server.peers] == [1, 1]


async def test_a_half_read_answer_is_not_reused() -> None:
    big = b"z" * 1_000_000  # more than the socket buffers hold: the server keeps writing

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response(big) if peer.index == 0 else response())

    async with raw_server(handler) as server, new_client() as client:
        async with (
            client.stream("GET", server.url) as answer,
            aclosing(answer.aiter_raw()) as pieces,
        ):
            async for _ in pieces:
                break  # left early: the rest of the body is never read
        assert await closed_soon(server.peers[0])
        assert (await client.get(server.url)).content == b"ok"
        assert len(server.peers) == 2


# -- no resend -----------------------------------------------------------------------


async def test_a_request_dropped_unanswered_is_an_error_not_a_resend() -> None:
    """The server may have acted on the request: the transport never sends it again."""

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response())
        if peer.index == 0:
            await peer.read_request()  # read, then hang up without answering
        else:
            await answer_each(peer)

    async with raw_server(handler) as server, new_client() as client:
        await client.get(server.url)
        with pytest.raises(httpx2.RemoteProtocolError, match="without sending a response"):
            await client.post(server.url, content=b"second")
        assert [r.body for r in server.requests] == [b"", b"second"]
        assert (await client.get(server.url)).content == b"ok"


async def test_the_model_client_retries_a_dropped_request_by_its_own_rules(
    socket_autojump_clock: Clock,
) -> None:
    """Not the transport: the client's retry rules (a network error, on_error asked)."""

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response(ANSWER, JSON))
        if peer.index == 0:
            await peer.read_request()  # the next request is read, then the server hangs up
            return
        await answer_each(peer, response(ANSWER, JSON))

    seen: list[ErrorInfo] = []

    def on_error(info: ErrorInfo) -> str:
        seen.append(info)
        return "retry"

    async with raw_server(handler) as server:
        options = model(server.url, retry_base_ms=0, on_error=on_error)
        async with create_client(options) as client:
            assert (await client.run("one")).text == "hello"
            assert (await client.run("two")).text == "hello"
    assert len(seen) == 1 and seen[0].status is None and seen[0].attempt == 0
    assert isinstance(seen[0].error, httpx2.RemoteProtocolError)
    assert seen[0].error.request.url.path == "/v1/chat/completions"
    assert [len(p.requests) for p in server.peers] == [2, 1]


# -- framing faults --------------------------------------------------------------------

BAD_ANSWERS = {
    "status": b"HTTP/1.1 2000 OK\r\n\r\n",
    "version": b"HTTP/2 200 OK\r\n\r\n",
    "length": b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
    "two lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
    "coding": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    "no colon": b"HTTP/1.1 200 OK\r\nContent-Length 2\r\n\r\nok",
    "space before colon": b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok",
    "NUL": b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nok",
    "bare CR": b"HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 2\r\n\r\nok",
    "head too large": b"HTTP/1.1 200 OK\r\n" + b"X-A: aaaaaaaa\r\n" * 10_000,
    "chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "chunk end": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX",
    "switching": b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
    "body cut": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    "chunks cut": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    "head cut": b"HTTP/1.1 200 OK\r\nContent-Le",
    "nothing": b"",
}


@pytest.mark.parametrize("answer", BAD_ANSWERS.values(), ids=BAD_ANSWERS.keys())
async def test_a_bad_answer_is_a_protocol_error(answer: bytes) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(answer)
        # The answers that end mid-way end with the connection.

    async with raw_server(handler) as server, new_client() as client:
        with pytest.raises(httpx2.RemoteProtocolError) as caught:
            await client.get(server.url)
        assert caught.value.request.url.port == server.port


async def test_framing_that_servers_use_is_read() -> None:
    answers = [
        b"HTTP/1.1 200\nX-Folded: one\n two\nContent-Length: 2\nX-Empty:\nSet-Cookie: a=1\n"
        b"Set-Cookie: b=2\n\nok",
        b"HTTP/1.1 100 Continue\r\n\r\n" * 2000 + response(b"after"),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4;name=value\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: t\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\nuntil the end",  # neither length nor chunks
    ]

    async def handler(peer: Peer) -> None:
        for answer in answers:
            await peer.read_request()
            await peer.send(answer)

    async with raw_server(handler) as server, new_client() as client:
        folded = await client.get(server.url)
        assert (await client.get(server.url)).content == b"after"
        assert (await client.get(server.url)).content == b"Wikipedia"
        assert (await client.get(server.url)).content == b"until the end"
    assert folded.content == b"ok" and folded.reason_phrase == ""
    assert folded.headers["x-folded"] == "one two" and folded.headers["x-empty"] == ""
    assert folded.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert len(server.peers) == 1  # kept alive through all of them


async def test_a_header_that_would_split_the_request_is_refused() -> None:
    async with raw_server(answer_each) as server, new_client() as client:
        with pytest.raises(httpx2.LocalProtocolError):
            await client.get(server.url, headers={"X-A": "a\r\nX-Injected: b"})
        assert server.requests == []


# -- streaming and cancellation -------------------------------------------------------


async def test_a_chunked_body_arrives_as_it_is_sent() -> None:
    got_first = trio.Event()

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await got_first.wait()  # nothing more is sent until the client has the first piece
        await peer.send(b"6\r\nsecond\r\n0\r\n\r\n")

    async with raw_server(handler) as server, new_client() as client:
        pieces = []
        async with client.stream("GET", server.url) as answer:
            async for piece in answer.aiter_raw():
                pieces.append(piece)
                got_first.set()
        assert pieces == [b"first", b"second"]


@pytest.mark.parametrize("where", ["head", "body"])
async def test_a_cancel_closes_the_socket_at_once(where: str, socket_autojump_clock: Clock) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        if where == "body":
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst")
        await peer.wait_closed()

    async with raw_server(handler) as server, new_client() as client:
        with trio.move_on_after(1) as scope:
            async with client.stream("GET", server.url) as answer:
                async for _ in answer.aiter_raw():
                    pass
        assert scope.cancelled_caught
        # Closed by the cancelled call itself: the client is still open.
        await trio.testing.wait_all_tasks_blocked()
        assert server.peers[0].closed.is_set()
        assert not client.is_closed


# -- TLS --------------------------------------------------------------------------------

trustme = pytest.importorskip("trustme")


@pytest.fixture(scope="module")
def ca() -> Any:
    return trustme.CA()


def server_context(ca: Any, *names: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


async def test_https_verified_against_ssl_cert_file_with_sni_alpn_and_keep_alive(
    ca: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.setattr(factory, "_ssl_context", None)  # loaded again, from the variable
    tls = server_context(ca, "localhost")
    async with raw_server(lambda p: answer_each(p, response(ANSWER, JSON)), tls=tls) as server:
        url = f"https://localhost:{server.port}"
        async with create_client(model(url)) as client:
            for _ in range(2):
                assert (await client.run("hi")).text == "hello"
    assert server.sni == ["localhost"]
    assert server.alpn == ["http/1.1"]  # offered h2 too: the client asks for http/1.1 only
    assert len(server.peers) == 1


@pytest.mark.parametrize("case", ["untrusted", "wrong name"])
async def test_a_certificate_that_does_not_verify_is_a_connect_error(
    ca: Any, case: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ("localhost",) if case == "untrusted" else ("other.example",)
    if case == "wrong name":  # trusted, but issued to another name
        bundle = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(bundle))
        monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
        monkeypatch.setattr(factory, "_ssl_context", None)
    seen: list[ErrorInfo] = []
    async with raw_server(answer_each, tls=server_context(ca, *names)) as server:
        url = f"https://localhost:{server.port}"
        async with create_client(model(url, retries=0, on_error=recording(seen))) as client:
            with pytest.raises(GenerateError, match="CERTIFICATE_VERIFY_FAILED") as caught:
                await client.run("hi")
    assert isinstance(seen[0].error, httpx2.ConnectError)
    assert f"cannot connect to localhost:{server.port}: [SSL: CERTIFICATE_VERIFY_FAILED]" in str(
        caught.value
    )
    assert server.requests == []


# -- proxies and schemes ------------------------------------------------------------------


async def test_proxies_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``HTTP_PROXY`` is used (the proxy gets the absolute URL); ``NO_PROXY`` bypasses it."""
    async with (
        raw_server(lambda p: answer_each(p, response(ANSWER, JSON))) as proxy,
        raw_server(lambda p: answer_each(p, response(ANSWER, JSON))) as direct,
    ):
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "localhost")
        async with create_client(model("http://model.example")) as client:
            assert (await client.run("via the proxy")).text == "hello"
        bypassing = model(f"http://localhost:{direct.port}")
        async with create_client(bypassing) as client:
            assert (await client.run("direct")).text == "hello"
    assert [r.line for r in proxy.requests] == [
        b"POST http://model.example/v1/chat/completions HTTP/1.1"
    ]
    assert len(direct.requests) == 1


@pytest.mark.parametrize("scheme", ["ws", "wss", "file"])
async def test_only_http_and_https_are_sent_even_after_a_redirect(scheme: str) -> None:
    async with raw_server(answer_each) as target:
        location = f"{scheme}://127.0.0.1:{target.port}/x".encode()

        async def redirect(peer: Peer) -> None:
            await answer_each(peer, response(b"", b"Location: " + location, status=b"302 Found"))

        async with raw_server(redirect) as server, new_client(follow_redirects=True) as client:
            with pytest.raises(
                httpx2.UnsupportedProtocol, match=f"unsupported URL scheme '{scheme}'"
            ):
                await client.get(server.url)
            with pytest.raises(httpx2.UnsupportedProtocol):
                await client.get(location.decode())
    assert target.requests == []
