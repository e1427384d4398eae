"""Streaming over SSE: deltas as they come, fragments joined, backpressure to the socket."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from http_helpers import KEY, STYLES, adder, calls_step, run_events, served
from raw_http_server import Peer, raw_server
from trio.abc import Clock

from toolnexus_trio import ClientOptions, create_client


@pytest.mark.parametrize("style", STYLES)
async def test_text_deltas_and_tool_call_fragments(style: str) -> None:
    script = [
        {"text": "let me add", "tool_calls": [
            {"name": "add", "arguments": {"a": 1, "b": 2}, "id": "c1"},
            {"name": "add", "arguments": {"a": 30, "b": 40}, "id": "c2"}]},
        {"text": "sums are 3 and 70"},
    ]  # fmt: skip
    async with served(style, script) as (provider, client):
        events = await run_events(client, "go", await adder())
    kinds = [e["type"] for e in events]
    assert kinds == [
        "text", "text", "text", "tool_call", "tool_call", "tool_result", "tool_result",
        "text", "text", "text", "text", "text", "usage", "done",
    ]  # fmt: skip
    assert "".join(e["delta"] for e in events[:3]) == "let me add"
    # Arguments arrived in two fragments each, interleaved by index, and were joined.
    assert [(e["id"], e["args"]) for e in events if e["type"] == "tool_call"] == [
        ("c1", {"a": 1, "b": 2}),
        ("c2", {"a": 30, "b": 40}),
    ]
    assert [e["output"] for e in events if e["type"] == "tool_result"] == ["3", "70"]
    result = events[-1]["result"]
    assert result.text == "sums are 3 and 70"
    assert result.usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
    assert all(r.json["stream"] is True for r in provider.requests)


@pytest.mark.parametrize("style", STYLES)
async def test_a_slow_consumer_loses_nothing_of_a_burst(style: str) -> None:
    """1,000 deltas sent as fast as the socket takes them; the consumer is slower."""
    async with served(style, [{"text": "x", "burst": 1000}]) as (_, client):
        received = 0
        async with client.stream("burst", None) as events:
            async for event in events:
                if event["type"] == "text":
                    received += 1
                    await trio.lowlevel.checkpoint()  # a consumer that yields on every delta
                    await trio.lowlevel.checkpoint()
                elif event["type"] == "done":
                    result = event["result"]
    assert received == 1000
    assert result.text == "x" * 1000


@pytest.mark.parametrize("style", STYLES)
async def test_backpressure_reaches_the_server(style: str) -> None:
    """While the consumer holds one event, the provider's send blocks: nothing is
    queued in the client, so memory stays bounded and nothing can be dropped."""
    delta = "y" * 16384
    count = 1000  # 16 MB: far more than the loopback socket buffers hold
    async with served(style, [{"text": delta, "burst": count}]) as (provider, client):
        texts: list[str] = []
        async with client.stream("big", None) as events:
            async for event in events:
                if event["type"] == "text":
                    texts.append(event["delta"])
                    if len(texts) == 1:
                        # Hold the first delta until every task (server included) is stuck.
                        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                        sent_while_paused = provider.requests[0].events_sent
                elif event["type"] == "done":
                    result = event["result"]
    assert sent_while_paused < count // 2
    assert len(texts) == count and all(t == delta for t in texts)
    assert len(result.text) == count * len(delta)


@pytest.mark.parametrize("style", STYLES)
async def test_a_server_that_ignores_stream_still_works(style: str) -> None:
    body = {
        "openai": '{"choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"},'
        ' "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}',
        "anthropic": '{"type": "message", "content": [{"type": "text", "text": "whole"}],'
        ' "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 2}}',
    }[style]
    step = {"body": body, "content_type": "application/json"}
    async with served(style, [step]) as (_, client):
        events = await run_events(client, "hi", None)
    assert [e["type"] for e in events] == ["text", "usage", "done"]
    assert events[0]["delta"] == "whole"
    assert events[-1]["result"].usage["total_tokens"] == 3


# -- the terminal event ends the turn (issue 17 item 27) -------------------------------


@pytest.mark.parametrize("style", STYLES)
async def test_the_turn_completes_at_the_terminal_event(
    style: str, socket_autojump_clock: Clock
) -> None:
    """A server that sends [DONE] / message_stop and then keeps the body open does not
    hold the run (it used to wait for the body's end forever): each turn completes at
    its terminal event, and the client hangs up."""
    script = [{**calls_step((1, 2)), "hold_open": True}, {"text": "it is 3", "hold_open": True}]
    async with served(style, script) as (provider, client):
        texts: list[str] = []
        with trio.fail_after(3600):  # a hang guard (virtual time), not a speed check
            result = await client.ask("add", await adder(), on_text=texts.append)
            for request in provider.requests:
                await request.closed.wait()  # the client closed each held-open answer
    assert result.status == "done" and result.text == "it is 3"
    assert "".join(texts) == "it is 3" and [r.output for r in result.tool_calls] == ["3"]
    assert len(provider.requests) == 2


def sse_answer(style: str) -> bytes:
    """A minimal whole streamed answer (``hi``) in *style*, ending in its terminal event."""
    if style == "openai":
        return (
            b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}, '
            b'"finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
        )
    return (
        b'event: message_start\ndata: {"type": "message_start", "message": {}}\n\n'
        b'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, '
        b'"content_block": {"type": "text", "text": ""}}\n\n'
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
        b'"delta": {"type": "text_delta", "text": "hi"}}\n\n'
        b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
    )


_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def raw_options(server: Any, style: str) -> ClientOptions:
    return ClientOptions(
        base_url=server.url + "/v1", style=style,  # type: ignore[arg-type]
        model="m", api_key=KEY, retries=0,
    )  # fmt: skip


@pytest.mark.parametrize("style", STYLES)
async def test_an_answer_broken_after_its_terminal_event_is_still_whole(style: str) -> None:
    """The server drops the connection after the terminal event, without ending the
    chunked body: the answer was whole, so the turn is done (it was an error)."""
    body = sse_answer(style)

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(_CHUNKED + b"%x\r\n" % len(body) + body + b"\r\n")

    async with raw_server(handler) as server, create_client(raw_options(server, style)) as client:
        texts: list[str] = []
        result = await client.ask("hi", on_text=texts.append)
    assert (result.status, result.text, texts) == ("done", "hi", ["hi"])


@pytest.mark.parametrize("style", STYLES)
async def test_a_stream_that_ends_properly_keeps_its_connection(style: str) -> None:
    """Stopping at the terminal event must not cost well-behaved servers their
    keep-alive: the end of the body that follows it is still read, and two streamed
    turns share one connection."""
    body = sse_answer(style)
    answer = _CHUNKED + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"

    async def handler(peer: Peer) -> None:
        while True:
            await peer.read_request()
            await peer.send(answer)

    async with raw_server(handler) as server, create_client(raw_options(server, style)) as client:
        for _ in range(2):
            assert (await client.ask("hi", on_text=lambda _: None)).text == "hi"
    assert len(server.requests) == 2 and len(server.peers) == 1
