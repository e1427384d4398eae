"""Connection set-up of the package's HTTP clients: an IP literal or ``localhost`` is
connected to directly (no resolver, no happy-eyeballs nursery), and a model client for
an ``http://`` URL loads no CA bundle, while TLS through it fails closed.
"""

from __future__ import annotations

import json
import socket
import ssl
from typing import Any

import httpx2
import pytest
import trio
from raw_http_server import answer_each, raw_server, response

from toolnexus_trio import ClientOptions, GenerateError, create_client
from toolnexus_trio import _http_client as factory

ANSWER = json.dumps(
    {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}]}
).encode()
JSON = b"Content-Type: application/json"


def model(url: str, **kw: Any) -> ClientOptions:
    return ClientOptions(base_url=url + "/v1", style="openai", model="m", api_key="k", **kw)


@pytest.fixture
def no_happy_eyeballs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``trio.open_tcp_stream`` recorded (it still works): the hosts it was asked for."""
    asked: list[str] = []
    real = trio.open_tcp_stream

    async def recording(host: str, port: int, **kw: Any) -> trio.SocketStream:
        asked.append(host)
        return await real(host, port, **kw)

    monkeypatch.setattr(trio, "open_tcp_stream", recording)
    return asked


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST"])
async def test_a_literal_or_localhost_is_connected_to_directly(
    host: str, no_happy_eyeballs: list[str]
) -> None:
    handler = lambda p: answer_each(p, response(ANSWER, JSON))  # noqa: E731
    async with raw_server(handler) as server:
        options = model(f"http://{host}:{server.port}")
        async with create_client(options) as client:
            assert (await client.run("hi")).text == "hello"
            assert (await client.run("hi")).text == "hello"
    assert no_happy_eyeballs == []
    assert len(server.peers) == 1  # kept alive, as before


@pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback here")
async def test_localhost_falls_back_to_the_ipv6_loopback(no_happy_eyeballs: list[str]) -> None:
    handler = lambda p: answer_each(p, response(ANSWER, JSON))  # noqa: E731
    async with raw_server(handler, host="::1") as server:
        async with create_client(model(f"http://localhost:{server.port}")) as client:
            assert (await client.run("hi")).text == "hello"
        async with create_client(model(f"http://[::1]:{server.port}")) as client:
            assert (await client.run("hi")).text == "hello"
    assert no_happy_eyeballs == []


async def test_a_name_still_takes_the_resolver(no_happy_eyeballs: list[str]) -> None:
    async with await factory.new_client(connect_timeout=5) as client:
        with pytest.raises(httpx2.ConnectError):
            await client.get("http://nowhere.invalid/")
    assert no_happy_eyeballs == ["nowhere.invalid"]


async def test_a_refused_direct_connect_names_host_port_and_reason() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with create_client(model(f"http://127.0.0.1:{port}", retries=0)) as client:
        with pytest.raises(GenerateError) as caught:
            await client.run("hi")
    assert f"cannot connect to 127.0.0.1:{port}: Connection refused" in str(caught.value)


async def test_an_http_model_loads_no_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> ssl.SSLContext:
        raise AssertionError("the CA bundle was loaded for a plain http model")

    monkeypatch.setattr(factory, "_load_ssl_context", refuse)
    monkeypatch.setattr(factory, "_ssl_context", None)
    handler = lambda p: answer_each(p, response(ANSWER, JSON))  # noqa: E731
    async with raw_server(handler) as server, create_client(model(server.url)) as client:
        assert (await client.run("hi")).text == "hello"


async def test_tls_through_a_plain_http_client_fails_closed() -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    plain = await factory.new_client(plain_http=True)
    async with raw_server(answer_each, tls=context) as server, plain as client:
        with pytest.raises(httpx2.ConnectError) as caught:
            await client.get(f"https://localhost:{server.port}/")
    assert "CERTIFICATE_VERIFY_FAILED" in factory.error_text(caught.value)
    assert server.requests == []
