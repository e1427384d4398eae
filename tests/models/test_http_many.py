"""A model client shared by many conversations has them all in flight at once (issue 39).

The client's own pool has no cap on connections: 150 streamed model calls through one
client are 150 requests the server holds open together. (httpx2's default pool stops at
100: the other 50 would wait for a free connection, and this server, which answers
only once every request has arrived, would never see them.)
"""

from __future__ import annotations

import json

import trio
from raw_http_server import Peer, raw_server
from trio.abc import Clock

from toolnexus_trio import ClientOptions, create_client

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

    async def conversation(client: object) -> None:
        async with client.stream("hello") as events:  # type: ignore[attr-defined]
            async for event in events:
                if event["type"] == "text":
                    texts.append(event["delta"])

    async with raw_server(hold_until_everyone_is_here) as server:
        options = ClientOptions(base_url=server.url + "/v1", style="openai", model="m")
        async with create_client(options) as client:
            with trio.move_on_after(_GIVE_UP_S):
                async with trio.open_nursery() as nursery:
                    for _ in range(CONVERSATIONS):
                        nursery.start_soon(conversation, client)
    assert most == CONVERSATIONS, f"only {most} of {CONVERSATIONS} requests were in flight"
    assert texts == ["hi"] * CONVERSATIONS
    assert len(server.peers) == CONVERSATIONS  # one connection each
