"""The model client's HTTP/1.1 transport against loopback servers that write raw bytes:
keep-alive, framing, stale and half-read connections, bad answers, cancellation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager

import httpx2
import pytest
import trio
import trio.testing
from raw_http_server import Peer, answer_each, raw_server, response
from trio.abc import Clock

from toolnexus_trio.models._transport import MAX_HEAD_BYTES, Http1Transport


@asynccontextmanager
async def lean_client(**kw: object) -> AsyncIterator[tuple[httpx2.AsyncClient, Http1Transport]]:
    transport = Http1Transport(**kw)  # type: ignore[arg-type]
    async with httpx2.AsyncClient(transport=transport) as client:
        yield client, transport


async def closed_soon(peer: Peer) -> bool:
    """Whether the server saw the client hang up on *peer* (bounded wait)."""
    with trio.move_on_after(5):
        await peer.closed.wait()
    return peer.closed.is_set()


# -- keep-alive ---------------------------------------------------------------


async def test_sequential_requests_share_one_connection() -> None:
    async with raw_server(answer_each) as server, lean_client() as (client, transport):
        for i in range(3):
            answer = await client.post(server.url + "/x", content=b"n=%d" % i)
            assert answer.status_code == 200 and answer.content == b"ok"
        assert len(server.peers) == 1
        assert [r.body for r in server.peers[0].requests] == [b"n=0", b"n=1", b"n=2"]
        assert transport.open_connections == 1 and transport.idle_connections == 1
    # One write per request: head and body arrived together.
    assert server.requests[0].line == b"POST /x HTTP/1.1"
    assert server.requests[0].header(b"content-length") == b"3"


async def test_a_half_read_response_is_not_reused() -> None:
    big = b"z" * 1_000_000  # more than the socket buffers hold: the server keeps writing

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response(big) if peer.index == 0 else response())

    async with raw_server(handler) as server, lean_client() as (client, transport):
        async with (
            client.stream("GET", server.url) as answer,
            aclosing(answer.aiter_raw()) as pieces,
        ):
            async for _ in pieces:
                break  # left early: the rest of the body is never read
        assert await closed_soon(server.peers[0])
        assert transport.open_connections == 0
        assert (await client.get(server.url)).content == b"ok"
        assert len(server.peers) == 2


async def test_a_body_read_to_its_end_frees_the_connection_without_aclose() -> None:
    async with raw_server(answer_each) as server, lean_client() as (client, transport):
        async with client.stream("GET", server.url) as answer:
            assert [c async for c in answer.aiter_raw()] == [b"ok"]
            assert transport.idle_connections == 1  # before the block closes the response
        await client.get(server.url)
        assert len(server.peers) == 1


# -- framing ------------------------------------------------------------------

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"4;name=value\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: t\r\n\r\n"
)


@pytest.mark.parametrize("piece", [1, 2, 3, 7, len(CHUNKED)])
async def test_chunked_bodies_in_any_pieces(piece: int) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send_pieces(CHUNKED, piece)
        await answer_each(peer)

    async with raw_server(handler) as server, lean_client() as (client, _):
        answer = await client.get(server.url)
        assert answer.content == b"Wikipedia in\r\n\r\nchunks."
        assert (await client.get(server.url)).content == b"ok"  # the same connection
        assert len(server.peers) == 1


async def test_a_chunked_body_arrives_as_it_is_sent() -> None:
    got_first = trio.Event()

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await got_first.wait()  # nothing more is sent until the client has the first piece
        await peer.send(b"6\r\nsecond\r\n0\r\n\r\n")

    async with raw_server(handler) as server, lean_client() as (client, _):
        pieces = []
        async with client.stream("GET", server.url) as answer:
            async for piece in answer.aiter_raw():
                pieces.append(piece)
                got_first.set()
        assert pieces == [b"first", b"second"]


async def test_a_body_until_close_and_bodies_of_none() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(b"HTTP/1.1 204 No Content\r\n\r\n")
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")  # a HEAD: no body
        await peer.read_request()
        await peer.send(b"HTTP/1.1 100 Continue\r\n\r\n" + response(b"after"))
        await peer.read_request()
        await peer.send(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")  # neither length nor chunks

    async with raw_server(handler) as server, lean_client() as (client, transport):
        assert (await client.get(server.url)).status_code == 204
        assert (await client.head(server.url)).content == b""
        assert (await client.get(server.url)).content == b"after"
        assert (await client.get(server.url)).content == b"until the end"
        assert len(server.peers) == 1  # kept alive through the first three
        assert transport.open_connections == 0  # but not after a body ended by the close


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok??",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
        response(b"ok", b"Connection: close"),
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    ],
    ids=["bytes after the body", "HTTP/1.0", "Connection: close", "length and chunked"],
)
async def test_a_connection_not_fit_for_another_request_is_closed(answer: bytes) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(answer)
        await peer.wait_closed()

    async with raw_server(handler) as server, lean_client() as (client, transport):
        assert (await client.get(server.url)).content == b"ok"
        assert await closed_soon(server.peers[0])
        assert transport.open_connections == 0


async def test_a_request_asking_to_close_is_not_kept() -> None:
    async with raw_server(answer_each) as server, lean_client() as (client, transport):
        await client.get(server.url, headers={"Connection": "close"})
        assert transport.open_connections == 0
        assert await closed_soon(server.peers[0])


async def test_lenient_where_servers_are() -> None:
    answer = (
        b"\r\n\r\nHTTP/1.1 200\nX-Folded: one\n two\nContent-Length: 2\nX-Empty:\nSet-Cookie: a=1\n"
        b"Set-Cookie: b=2\n\nok"
    )

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(answer)

    async with raw_server(handler) as server, lean_client() as (client, _):
        got = await client.get(server.url)
    assert got.content == b"ok" and got.status_code == 200 and got.reason_phrase == ""
    assert got.headers["x-folded"] == "one two" and got.headers["x-empty"] == ""
    assert got.headers.get_list("set-cookie") == ["a=1", "b=2"]


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
    "head too large": b"HTTP/1.1 200 OK\r\n" + b"X-A: aaaaaaaa\r\n" * (MAX_HEAD_BYTES // 15),
    "chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "chunk end": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX",
    "switching": b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
    "body cut": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    "chunks cut": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    "head cut": b"HTTP/1.1 200 OK\r\nContent-Le",
    "nothing": b"",
}


@pytest.mark.parametrize("answer", BAD_ANSWERS.values(), ids=BAD_ANSWERS.keys())
async def test_a_bad_answer_is_a_protocol_error_and_its_connection_is_closed(
    answer: bytes,
) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(answer)
        # The answers that end mid-way end with the connection.

    async with raw_server(handler) as server, lean_client() as (client, transport):
        with pytest.raises(httpx2.RemoteProtocolError) as caught:
            await client.get(server.url)
        assert caught.value.request.url.port == server.port
        assert transport.open_connections == 0


async def test_a_header_that_would_split_the_request_is_refused() -> None:
    async with raw_server(answer_each) as server, lean_client() as (client, _):
        with pytest.raises(httpx2.LocalProtocolError):
            await client.get(server.url, headers={"X-A": "a\r\nX-Injected: b"})
        with pytest.raises(httpx2.LocalProtocolError):
            await client.get(server.url, headers={"Bad Name": "b"})
        assert server.requests == []


async def test_a_streamed_request_body_is_sent_chunked() -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"hello "
        yield b""
        yield b"world"

    async with raw_server(answer_each) as server, lean_client() as (client, _):
        await client.post(server.url, content=parts())
    assert server.requests[0].header(b"transfer-encoding") == b"chunked"
    assert server.requests[0].body == b"6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n"


# -- stale connections and failures -------------------------------------------


async def test_a_kept_alive_connection_the_server_closed_is_replaced_unseen() -> None:
    """Closed while idle: nothing was written on it, so another one is taken."""

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response())  # keep-alive as far as the client knows

    async with raw_server(handler) as server, lean_client() as (client, transport):
        await client.get(server.url)
        assert transport.idle_connections == 1
        await trio.testing.wait_all_tasks_blocked()  # the server has closed its side
        assert (await client.get(server.url)).content == b"ok"
        assert [len(p.requests) for p in server.peers] == [1, 1]


async def test_a_connection_dropped_after_reading_the_request_is_an_error_not_a_resend() -> None:
    """The server may have acted on the request: the transport never sends it again."""

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response())
        if peer.index == 0:
            await peer.read_request()  # read, then hang up without answering
        else:
            await answer_each(peer)

    async with raw_server(handler) as server, lean_client() as (client, transport):
        await client.get(server.url)
        with pytest.raises(httpx2.RemoteProtocolError, match="without sending a response"):
            await client.post(server.url, content=b"second")
        assert [r.body for r in server.requests] == [b"", b"second"]
        assert transport.open_connections == 0
        assert (await client.get(server.url)).content == b"ok"


async def test_connection_refused_is_a_connect_error() -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        async with lean_client() as (client, transport):
            with pytest.raises(httpx2.ConnectError):
                await client.get(f"http://127.0.0.1:{port}/")
            assert transport.open_connections == 0


async def test_an_unsupported_scheme_is_refused() -> None:
    async with lean_client() as (_, transport):
        with pytest.raises(httpx2.UnsupportedProtocol):
            await transport.handle_async_request(httpx2.Request("GET", "ftp://example.test/"))


# -- cancellation ---------------------------------------------------------------


@pytest.mark.parametrize("where", ["head", "body"])
async def test_a_cancel_closes_the_socket_at_once(where: str, socket_autojump_clock: Clock) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        if where == "body":
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst")
        await peer.wait_closed()

    async with raw_server(handler) as server, lean_client() as (_, transport):
        request = httpx2.Request("GET", server.url)
        answer: httpx2.Response | None = None
        with trio.move_on_after(1) as scope:
            answer = await transport.handle_async_request(request)
            async for _ in answer.stream:  # type: ignore[union-attr]
                pass
        assert scope.cancelled_caught
        # Closed by the cancelled call itself: nobody has closed the response yet.
        assert transport.open_connections == 0
        await trio.testing.wait_all_tasks_blocked()
        assert server.peers[0].closed.is_set()
        if answer is not None:
            await answer.aclose()


# -- the pool -------------------------------------------------------------------


async def test_the_pool_bound_holds_and_a_finished_answer_frees_a_slot() -> None:
    release = [trio.Event() for _ in range(3)]

    async def handler(peer: Peer) -> None:
        while True:
            request = await peer.read_request()
            await release[int(request.body)].wait()
            await peer.send(response(request.body))

    async with raw_server(handler) as server, lean_client(max_connections=2) as (client, pool):
        got: dict[int, bytes] = {}

        async def one(i: int) -> None:
            got[i] = (await client.post(server.url, content=b"%d" % i)).content

        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(one, i)
            await trio.testing.wait_all_tasks_blocked()
            assert len(server.peers) == 2 and pool.open_connections == 2
            assert len(server.requests) == 2  # the third waits for a slot
            waiting = ({0, 1, 2} - {int(r.body) for r in server.requests}).pop()
            first = next(i for i in range(3) if i != waiting)
            release[first].set()
            release[waiting].set()
            await trio.testing.wait_all_tasks_blocked()
            assert pool.open_connections <= 2
            for event in release:
                event.set()
        assert got == {0: b"0", 1: b"1", 2: b"2"}
        assert pool.open_connections <= 2


async def test_a_full_pool_closes_an_idle_connection_of_another_host() -> None:
    async with (
        raw_server(answer_each) as a,
        raw_server(answer_each) as b,
        lean_client(max_connections=1) as (client, pool),
    ):
        await client.get(a.url)
        await client.get(b.url)
        assert await closed_soon(a.peers[0])
        assert pool.open_connections == 1


async def test_waiting_for_a_slot_has_the_pool_timeout(autojump_clock: Clock) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.wait_closed()

    async with (
        raw_server(handler) as server,
        lean_client(max_connections=1) as (client, _),
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(client.get, server.url)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(httpx2.PoolTimeout):
            await client.get(server.url, timeout=httpx2.Timeout(None, pool=2.0))
        nursery.cancel_scope.cancel()


async def test_reads_have_the_read_timeout_when_one_is_set(autojump_clock: Clock) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.wait_closed()

    async with raw_server(handler) as server, lean_client() as (client, transport):
        with pytest.raises(httpx2.ReadTimeout):
            await client.get(server.url, timeout=httpx2.Timeout(None, read=3.0))
        assert transport.open_connections == 0


async def test_aclose_closes_idle_connections_and_refuses_more() -> None:
    async with raw_server(answer_each) as server:
        transport = Http1Transport()
        client = httpx2.AsyncClient(transport=transport)
        await client.get(server.url)
        await client.aclose()
        assert await closed_soon(server.peers[0])
        with pytest.raises(RuntimeError, match="closed"):
            await transport.handle_async_request(httpx2.Request("GET", server.url))


async def test_closing_the_pool_fails_requests_in_flight_and_waiting() -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.wait_closed()

    outcomes: dict[str, BaseException] = {}

    async def one(name: str, client: httpx2.AsyncClient, url: str) -> None:
        try:
            await client.get(url)
        except Exception as exc:
            outcomes[name] = exc

    async with (
        raw_server(handler) as server,
        lean_client(max_connections=1) as (client, transport),
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(one, "in flight", client, server.url)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(one, "waiting", client, server.url)
        await trio.testing.wait_all_tasks_blocked()
        await transport.aclose()
    assert isinstance(outcomes["in flight"], httpx2.ReadError)
    assert isinstance(outcomes["waiting"], RuntimeError)
    assert transport.open_connections == 0
