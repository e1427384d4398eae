"""Streaming over SSE: deltas as they come, fragments joined, backpressure to the socket."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
import trio.testing
from http_helpers import STYLES, adder, run_events, served


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
