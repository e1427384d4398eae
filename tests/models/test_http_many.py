"""A model client shared by many conversations has them all in flight at once (issue 39),
spread over the transport's pools.

The client's own pool has no cap on connections: 150 streamed model calls through one
client are 150 requests the server holds open together. (httpx2's default pool stops at
100: the other 50 would wait for a free connection, and this server, which answers
only once every request has arrived, would never see them.)
"""

from __future__ import annotations

import json

import attrs
import httpx2
import pytest
import trio
from raw_http_server import Peer, raw_server, response
from trio.abc import Clock

from toolnexus_trio import Client, ClientOptions, create_client
from toolnexus_trio import _http_client as factory
from toolnexus_trio import _http_pool as direct

CONVERSATIONS = 150
_GIVE_UP_S = 600  # virtual time: only an idle run (nobody can proceed) gets there


def sse_answer(text: str) -> bytes:
    """A streamed openai-style answer: one text delta, the finish, ``[DONE]``."""
    events = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    body += b"data: [DONE]\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
    return head % len(body) + body


async def conversation(client: Client, texts: list[str]) -> None:
    """One streamed model call; its text deltas go to *texts*."""
    async with client.stream("hello") as events:
        texts.extend([event["delta"] async for event in events if event["type"] == "text"])


async def test_150_streamed_conversations_are_in_flight_at_once(
    socket_autojump_clock: Clock,
) -> None:
    in_flight = 0
    most = 0
    everyone = trio.Event()

    async def hold_until_everyone_is_here(peer: Peer) -> None:
        nonlocal in_flight, most
        while True:
            await peer.read_request()
            in_flight += 1
            most = max(most, in_flight)
            if in_flight == CONVERSATIONS:
                everyone.set()
            await everyone.wait()
            in_flight -= 1
            await peer.send(sse_answer("hi"))

    texts: list[str] = []

    async with raw_server(hold_until_everyone_is_here) as server:
        options = ClientOptions(base_url=server.url + "/v1", style="openai", model="m")
        async with create_client(options) as client:
            with trio.move_on_after(_GIVE_UP_S):
                async with trio.open_nursery() as nursery:
                    for _ in range(CONVERSATIONS):
                        nursery.start_soon(conversation, client, texts)
    assert most == CONVERSATIONS, f"only {most} of {CONVERSATIONS} requests were in flight"
    assert texts == ["hi"] * CONVERSATIONS
    assert len(server.peers) == CONVERSATIONS  # one connection each


async def test_max_connections_caps_the_clients_own_pool(socket_autojump_clock: Clock) -> None:
    """``max_connections=3``: six conversations take turns on three connections."""
    cap = 3
    in_flight = 0
    most = 0
    batch = [trio.Event()]

    async def answer_in_batches_of_three(peer: Peer) -> None:
        nonlocal in_flight, most
        while True:
            await peer.read_request()
            in_flight += 1
            most = max(most, in_flight)
            mine = batch[0]
            if in_flight == cap:  # a full batch: answer its three requests
                batch[0] = trio.Event()
                mine.set()
            await mine.wait()
            in_flight -= 1
            await peer.send(sse_answer("hi"))

    texts: list[str] = []

    async with raw_server(answer_in_batches_of_three) as server:
        options = ClientOptions(
            base_url=server.url + "/v1", style="openai", model="m", max_connections=cap
        )
        async with create_client(options) as client:
            with trio.move_on_after(_GIVE_UP_S):
                async with trio.open_nursery() as nursery:
                    for _ in range(2 * cap):
                        nursery.start_soon(conversation, client, texts)
    assert most == cap
    assert texts == ["hi"] * (2 * cap)
    assert len(server.peers) == cap  # the second three reused the first three's


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_max_connections_must_be_a_positive_int(bad: object) -> None:
    options = ClientOptions(base_url="http://127.0.0.1:9/v1", style="openai", model="m")
    with pytest.raises(ValueError, match="max_connections"):
        create_client(attrs.evolve(options, max_connections=bad))


async def test_requests_in_flight_are_spread_evenly_over_the_pools(
    socket_autojump_clock: Clock,
) -> None:
    """The uncapped transport's pools each hold a share of the connections (each scan
    of a pool sees only its own), and one caller alone keeps reusing one connection."""
    n = 150
    in_flight = 0
    everyone = trio.Event()
    spread: list[int] = []

    async def hold_until_everyone_is_here(peer: Peer) -> None:
        nonlocal in_flight
        while True:
            await peer.read_request()
            in_flight += 1
            if in_flight == n:
                spread.extend(len(s.pool.connections) for s in transport.shards)
                everyone.set()
            await everyone.wait()
            in_flight -= 1
            await peer.send(response(b"ok"))

    async def one(http: httpx2.AsyncClient, url: str) -> None:
        async with http.stream("GET", url) as answer:
            assert await answer.aread() == b"ok"

    async with (
        raw_server(hold_until_everyone_is_here) as server,
        await factory.new_client() as http,
    ):
        transport = factory.own_transport(http)
        assert isinstance(transport, direct.PoolTransport)
        with trio.move_on_after(_GIVE_UP_S):
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(one, http, server.url)
        assert sum(spread) == n and max(spread) - min(spread) <= 1, spread
        assert len(spread) == direct.SHARDS
        for _ in range(3):  # alone: the first pool's kept-alive connection, again
            await one(http, server.url)
    assert len(server.peers) == n
