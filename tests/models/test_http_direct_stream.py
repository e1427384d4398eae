"""The direct connection's stream (``_http_pool._DirectStream``): a non-blocking socket
that holds a request's writes until its read, stays a cancel point on every operation,
and yields to the scheduler at least every few operations even when the peer always
has bytes ready.

Driven on a connected socket pair, so what the peer received is read straight off it.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpcore2
import httpx2
import pytest
import trio
import trio.testing
from raw_http_server import answer_each, raw_server, response

from toolnexus_trio import ClientOptions, create_client
from toolnexus_trio import _http_client as factory
from toolnexus_trio import _http_pool as direct
from toolnexus_trio._streak import FAIR_EVERY


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    peer.setblocking(False)
    with ours, peer:
        yield ours, peer


def peer_has(peer: socket.socket) -> bytes:
    """What the peer can read now (``b""`` when nothing arrived)."""
    try:
        return peer.recv(1 << 20)
    except BlockingIOError:
        return b""


async def test_writes_are_held_until_the_read_and_sent_as_one(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    stream = direct._DirectStream(ours)
    await stream.write(b"POST / HTTP/1.1\r\n\r\n")
    await stream.write(b"body")
    assert peer_has(peer) == b""  # nothing sent before the request reads its answer
    peer.send(b"answer")
    assert await stream.read(100) == b"answer"
    assert peer_has(peer) == b"POST / HTTP/1.1\r\n\r\nbody"  # once, in order


async def test_a_large_write_is_sent_without_waiting_for_a_read(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    stream = direct._DirectStream(ours)
    await stream.write(b"x" * direct._HOLD_BYTES)
    got = b""
    while chunk := peer_has(peer):
        got += chunk
    assert got == b"x" * direct._HOLD_BYTES


async def test_held_bytes_are_dropped_on_close_and_a_write_after_it_fails(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    stream = direct._DirectStream(ours)
    await stream.write(b"never read")
    await stream.aclose()
    assert peer_has(peer) == b""  # the peer sees the close, not a request without reader
    with pytest.raises(httpcore2.WriteError):
        await stream.write(b"more")


async def test_every_operation_is_a_cancel_point_even_when_ready(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    stream = direct._DirectStream(ours)
    peer.send(b"ready")
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await stream.read(100)
        with pytest.raises(trio.Cancelled):
            await stream.write(b"x")
    assert await stream.read(100) == b"ready"  # nothing was consumed by the cancelled read


async def test_a_peer_that_always_has_bytes_ready_cannot_starve_other_tasks(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    stream = direct._DirectStream(ours)
    peer.send(b"x" * 1000)
    ran = 0

    async def other() -> None:
        nonlocal ran
        while True:
            ran += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        before = ran
        for _ in range(4 * FAIR_EVERY):
            assert await stream.read(1) == b"x"  # never waits: the bytes are there
        assert ran - before >= 3  # the other task ran every _FAIR_EVERY reads at least
        nursery.cancel_scope.cancel()


async def test_a_read_timeout_is_httpcores_read_timeout(
    pair: tuple[socket.socket, socket.socket], autojump_clock: trio.testing.MockClock
) -> None:
    ours, _ = pair
    stream = direct._DirectStream(ours)
    with pytest.raises(httpcore2.ReadTimeout):
        await stream.read(100, timeout=5)


async def test_a_peer_that_closed_makes_an_idle_connection_readable(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    stream = direct._DirectStream(ours)
    assert stream.get_extra_info("is_readable") is False
    peer.close()
    assert stream.get_extra_info("is_readable") is True


# -- the owned pool's direct send ------------------------------------------------------

ANSWER = json.dumps(
    {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}]}
).encode()
JSON = b"Content-Type: application/json"


async def test_a_set_cookie_answer_is_kept_and_sent_back_as_by_send() -> None:
    handler = lambda p: answer_each(p, response(ANSWER, JSON, b"Set-Cookie: sticky=1"))  # noqa: E731
    async with raw_server(handler) as server:
        options = ClientOptions(base_url=server.url + "/v1", style="openai", model="m")
        async with create_client(options) as client:
            await client.run("one")
            await client.run("two")
    first, second = [request for peer in server.peers for request in peer.requests]
    assert first.header(b"cookie") is None
    assert second.header(b"cookie") == b"sticky=1"


async def test_the_direct_send_logs_httpx2s_request_line(caplog: pytest.LogCaptureFixture) -> None:
    handler = lambda p: answer_each(p, response(ANSWER, JSON))  # noqa: E731
    async with raw_server(handler) as server:
        options = ClientOptions(base_url=server.url + "/v1", style="openai", model="m")
        async with create_client(options) as client:
            with caplog.at_level("INFO", logger="httpx2"):
                await client.run("one")
    assert any(
        "HTTP Request: POST" in r.getMessage() and "200 OK" in r.getMessage()
        for r in caplog.records
    )


def test_only_a_pool_made_without_a_proxy_is_sent_to_directly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The direct send skips httpx2's choice of a transport per URL: only a pool whose
    # every request takes the one transport (no proxy in the environment) offers it.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    assert factory.own_transport(factory.new_client_blocking()) is not None
    assert factory.own_transport(httpx2.AsyncClient()) is None  # a caller's own
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert factory.own_transport(factory.new_client_blocking()) is None


async def test_a_loopback_connect_does_not_wait_in_trio(monkeypatch: pytest.MonkeyPatch) -> None:
    # The handshake is done when connect returns EINPROGRESS on loopback: no epoll
    # registration and scheduler pass for it.
    waited: list[object] = []
    real = trio.lowlevel.wait_writable

    async def recording(sock: object) -> None:
        waited.append(sock)
        await real(sock)  # type: ignore[arg-type]

    monkeypatch.setattr(trio.lowlevel, "wait_writable", recording)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        sock = await direct._connect("127.0.0.1", listener.getsockname()[1])
        sock.close()
    assert waited == []


async def test_a_refused_loopback_connect_is_an_oserror_and_closes_the_socket() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(OSError, match="refused"):
            await direct._connect("127.0.0.1", port)


async def test_a_connect_that_hangs_times_out_with_httpcores_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # a full accept queue: later handshakes get no answer
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(4)]
        try:
            for filler in fillers:
                filler.setblocking(False)
                filler.connect_ex(("127.0.0.1", port))
            backend = direct._DirectBackend()
            with pytest.raises(httpcore2.ConnectTimeout, match="timed out"):
                await backend.connect_tcp("127.0.0.1", port, timeout=5)
        finally:
            for filler in fillers:
                filler.close()


async def test_a_model_request_leaves_out_the_headers_http11_implies() -> None:
    handler = lambda p: answer_each(p, response(ANSWER, JSON))  # noqa: E731
    async with raw_server(handler) as server:
        options = ClientOptions(base_url=server.url + "/v1", style="openai", model="m")
        async with create_client(options) as client:
            await client.run("one")
    (request,) = server.peers[0].requests
    assert request.header(b"accept") is None
    assert request.header(b"connection") is None
    assert request.header(b"accept-encoding") is not None  # compressed answers still asked
    assert request.header(b"content-type") == b"application/json"


async def test_an_early_answer_is_read_even_when_the_held_request_cannot_be_sent(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    # httpcore2 reads on after a failed request write (a server may answer an error
    # and close before taking the whole request); a write held until the read is no
    # different.
    ours, peer = pair
    stream = direct._DirectStream(ours)
    await stream.write(b"the rest of a request")  # held
    peer.send(b"HTTP/1.1 413 Content Too Large\r\n\r\n")
    peer.close()
    assert await stream.read(100) == b"HTTP/1.1 413 Content Too Large\r\n\r\n"
    assert await stream.read(100) == b""
