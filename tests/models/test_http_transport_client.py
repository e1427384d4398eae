"""The model client, ``ask`` and ``webfetch`` on the shared HTTP client factory: an
early answer, credentials in the URL, a refused connection, cookies, a cut answer."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from typing import Any

import httpx2
import pytest
import trio
from raw_http_server import Peer, answer_each, raw_server, response
from trio.abc import Clock

from toolnexus_trio import (
    ClientOptions,
    ErrorInfo,
    GenerateError,
    ToolContext,
    create_client,
    create_toolkit,
)

ANSWER = json.dumps(
    {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}]}
).encode()
JSON = b"Content-Type: application/json"
KEYS = ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY")


def model(url: str, **kw: Any) -> ClientOptions:
    kw.setdefault("api_key", "k")
    return ClientOptions(base_url=url + "/v1", style="openai", model="m", **kw)


async def dead_port() -> int:
    """A loopback port nothing listens on: bound, never listening."""
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


async def run_ask(*argv: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    with trio.fail_after(60):
        done: subprocess.CompletedProcess[bytes] = await trio.run_process(
            [sys.executable, "-m", "toolnexus_trio", "ask", "hi", *argv],
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
            start_new_session=True,
        )
    return done


# -- 17.22: an early answer while the body is still being sent ----------------------------


async def test_an_early_413_is_the_answer_and_the_body_is_sent_once() -> None:
    """The server reads the head, answers 413 and closes while 8 MiB are still coming."""
    heads: list[bytes] = []

    async def handler(peer: Peer) -> None:
        while b"\r\n\r\n" not in peer.buffer:
            await peer._more()
        heads.append(peer.buffer.partition(b"\r\n\r\n")[0])
        await peer.send(response(b'{"error":"too large"}', JSON, status=b"413 Payload Too Large"))
        # and the connection closes, the rest of the body unread

    async with (
        raw_server(handler) as server,
        create_client(model(server.url, retry_base_ms=0)) as client,
    ):
        with pytest.raises(GenerateError) as caught:
            await client.run("x" * (8 * 1024 * 1024))
    assert caught.value.status == 413
    assert str(caught.value).startswith(f"HTTP 413 from POST {server.url}/v1/chat/completions: ")
    assert "too large" in str(caught.value)
    assert len(heads) == 1  # sent once: a 413 is not retried, and nothing was resent


# -- 17.23: credentials in base_url ------------------------------------------------------

PASSWORD = "pa:ss@w0rd-9f3e"
QUOTED = "pa%3Ass%40w0rd-9f3e"


async def test_url_credentials_are_sent_as_basic_auth(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with raw_server(lambda p: answer_each(p, response(ANSWER, JSON))) as server:
        url = f"http://alice:{QUOTED}@127.0.0.1:{server.port}"
        options = model(url, api_key=None)
        async with create_client(options) as client:
            assert (await client.run("hi")).text == "hello"
    token = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    (request,) = server.requests
    assert request.line == b"POST /v1/chat/completions HTTP/1.1"
    assert request.header(b"authorization") == f"Basic {token}".encode()
    assert request.header(b"host") == f"127.0.0.1:{server.port}".encode()
    shown = caplog.text + repr(options)
    assert "httpx2" in caplog.text  # the request was logged, without the password
    assert PASSWORD not in shown and QUOTED not in shown


async def test_url_credentials_never_appear_in_errors(
    caplog: pytest.LogCaptureFixture, socket_autojump_clock: Clock
) -> None:
    """Not in the message of an HTTP error (even a body that echoes them), nor of a
    network error, nor in a log line."""
    caplog.set_level(logging.DEBUG)
    token = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    echo = f"denied: Basic {token} for {PASSWORD}".encode()
    port = await dead_port()
    async with raw_server(lambda p: answer_each(p, response(echo, status=b"400 No"))) as server:
        url = f"http://alice:{QUOTED}@127.0.0.1:{server.port}"
        async with create_client(model(url)) as client:
            with pytest.raises(GenerateError) as denied:
                await client.run("hi")
    async with create_client(model(f"http://alice:{QUOTED}@127.0.0.1:{port}")) as client:
        with pytest.raises(GenerateError) as refused:
            await client.run("hi")
    messages = f"{denied.value}\n{refused.value}\n{caplog.text}"
    assert str(denied.value).startswith(f"HTTP 400 from POST http://127.0.0.1:{server.port}/v1")
    assert "denied: Basic [redacted] for [redacted]" in str(denied.value)
    assert str(refused.value).startswith(f"POST http://127.0.0.1:{port}/v1/chat/completions")
    for secret in (PASSWORD, QUOTED, token):
        assert secret not in messages
    with pytest.raises(ValueError) as bad:
        create_client(ClientOptions(base_url=f"ftp://alice:{QUOTED}@h/", style="openai", model="m"))
    assert QUOTED not in str(bad.value) and "alice:[redacted]@h" in str(bad.value)


async def test_ask_never_prints_a_url_password() -> None:
    port = await dead_port()
    done = await run_ask("--base-url", f"http://alice:{QUOTED}@127.0.0.1:{port}/v1",
                         "--style", "openai", "--model", "m", "--api-key", "sk-key-77")  # fmt: skip
    bad = await run_ask("--base-url", f"ftp://alice:{QUOTED}@127.0.0.1/v1",
                        "--style", "openai", "--model", "m")  # fmt: skip
    assert (done.returncode, bad.returncode) == (1, 2)
    out = (done.stdout + done.stderr + bad.stdout + bad.stderr).decode()
    assert f"127.0.0.1:{port}" in out and "alice:[redacted]@127.0.0.1" in out
    assert QUOTED not in out and PASSWORD not in out and "sk-key-77" not in out


# -- 17.25: a refused connection says so ------------------------------------------------


async def test_a_refused_connection_names_host_port_and_reason(
    socket_autojump_clock: Clock,
) -> None:
    port = await dead_port()
    seen: list[ErrorInfo] = []

    def on_error(info: ErrorInfo) -> str:
        seen.append(info)
        return "retry"

    async with create_client(model(f"http://127.0.0.1:{port}", on_error=on_error)) as client:
        with pytest.raises(GenerateError) as caught:
            await client.run("hi")
    assert str(caught.value) == (
        f"POST http://127.0.0.1:{port}/v1/chat/completions failed: "
        f"ConnectError: cannot connect to 127.0.0.1:{port}: Connection refused"
    )
    assert len(seen) == 3 and all(isinstance(i.error, httpx2.ConnectError) for i in seen)


async def test_ask_and_webfetch_name_a_refused_connection() -> None:
    port = await dead_port()
    done = await run_ask("--base-url", f"http://127.0.0.1:{port}/v1", "--style", "anthropic",
                         "--model", "m")  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"error: POST http://127.0.0.1:{port}/v1/messages failed: "
        f"ConnectError: cannot connect to 127.0.0.1:{port}: Connection refused"
    ]
    async with await create_toolkit() as toolkit:
        url = f"http://127.0.0.1:{port}/page"
        result = await toolkit.execute("webfetch", {"url": url}, ToolContext())
    assert result.is_error
    assert result.output == f"webfetch: cannot connect to 127.0.0.1:{port}: Connection refused"


# -- cookies, a closed client, a cut answer ----------------------------------------------


async def test_cookies_set_by_the_server_are_sent_back() -> None:
    async def handler(peer: Peer) -> None:
        cookie = b"Set-Cookie: session=abc; Path=/"
        await answer_each(peer, response(ANSWER, JSON, cookie))

    async with raw_server(handler) as server, create_client(model(server.url)) as client:
        await client.run("one")
        await client.run("two")
    assert [r.header(b"cookie") for r in server.requests] == [None, b"session=abc"]
    assert server.requests[1].header(b"authorization") == b"Bearer k"


async def test_a_closed_client_fails_its_next_call_clearly() -> None:
    async with (
        raw_server(lambda p: answer_each(p, response(ANSWER, JSON))) as server,
        create_client(model(server.url)) as client,
    ):
        await client.run("one")
        await client.aclose()
        with pytest.raises(Exception, match="closed"):
            await client.run("two")


async def test_an_answer_cut_mid_body_is_retried_with_its_request_on_the_error() -> None:
    async def handler(peer: Peer) -> None:
        if peer.index == 0:
            await peer.read_request()
            await peer.send(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"choi')
            return  # and the connection ends
        await answer_each(peer, response(ANSWER, JSON))

    seen: list[ErrorInfo] = []

    def on_error(info: ErrorInfo) -> str:
        seen.append(info)
        return "retry"

    async with (
        raw_server(handler) as server,
        create_client(model(server.url, retry_base_ms=0, on_error=on_error)) as client,
    ):
        assert (await client.run("one")).text == "hello"
    assert len(seen) == 1 and isinstance(seen[0].error, httpx2.RemoteProtocolError)
    assert seen[0].error.request.url.path == "/v1/chat/completions"
    assert len(server.peers) == 2
