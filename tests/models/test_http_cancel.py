"""Cancellation and deadlines abort the in-flight HTTP request at once, are never retried,
leave no task behind, and leave the connection pool usable."""

from __future__ import annotations

import pytest
import trio
from helpers import TaskCensus
from http_helpers import STYLES, served
from trio.abc import Clock

from toolnexus_trio import CancelToken, ErrorInfo, RunTimeout


def assert_no_client_tasks(census: TaskCensus) -> None:
    """No task started in the block outlives it, the provider's connection handlers aside."""
    stray = [t.name for t in census.new_tasks() if "serve_listeners" not in t.name]
    assert not stray, f"tasks outlived their scope: {stray}"


async def closed_soon(provider: object, index: int) -> bool:
    """Whether the provider saw request *index*'s connection end (bounded wait)."""
    request = provider.requests[index]  # type: ignore[attr-defined]
    with trio.move_on_after(5):
        await request.closed.wait()
    return bool(request.closed.is_set())


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("stream", [False, True])
async def test_the_run_token_aborts_a_stalled_request(
    style: str, stream: bool, socket_autojump_clock: Clock
) -> None:
    seen: list[ErrorInfo] = []
    script = [{"stall": True}, {"text": "after"}]
    async with served(style, script, on_error=seen.append) as (provider, client):
        token = CancelToken()
        with TaskCensus() as census:
            async with trio.open_nursery() as nursery:

                async def cancel_when_asked() -> None:
                    await provider.wait_request(0)
                    token.cancel("user pressed stop")

                nursery.start_soon(cancel_when_asked)
                if stream:
                    async with client.stream("hi", None, cancel=token) as events:
                        result = [e async for e in events][-1]["result"]
                else:
                    result = await client.run("hi", None, cancel=token)
            assert_no_client_tasks(census)
        assert result.status == "cancelled"
        assert result.messages == [{"role": "user", "content": "hi"}]
        assert await closed_soon(provider, 0)
        # Not retried, not shown to on_error; and the pool still works.
        assert len(provider.requests) == 1 and seen == []
        assert (await client.run("again")).text == "after"


@pytest.mark.parametrize("style", STYLES)
async def test_cancel_mid_stream_closes_the_connection(
    style: str, socket_autojump_clock: Clock
) -> None:
    script = [{"text": "one two three four five", "stall_after": 6}, {"text": "next"}]
    async with served(style, script) as (provider, client):
        token = CancelToken()
        deltas: list[str] = []
        async with client.stream("hi", None, cancel=token) as events:
            async for event in events:
                if event["type"] == "text":
                    deltas.append(event["delta"])
                    if len(deltas) == 2:
                        token.cancel()
                elif event["type"] == "done":
                    result = event["result"]
        assert result.status == "cancelled" and deltas == ["one ", "two "]
        assert await closed_soon(provider, 0)
        assert (await client.run("again")).text == "next"


@pytest.mark.parametrize("style", STYLES)
async def test_run_timeout_aborts_the_request(style: str, socket_autojump_clock: Clock) -> None:
    script = [{"stall": True}, {"text": "after"}]
    async with served(style, script, run_timeout_ms=2000) as (provider, client):
        started = trio.current_time()
        with pytest.raises(RunTimeout) as caught:
            await client.run("hi")
        assert 2.0 <= trio.current_time() - started < 2.1
        assert caught.value.result.limit == "runTimeout"
        assert await closed_soon(provider, 0)
        assert len(provider.requests) == 1
        assert (await client.run("again")).text == "after"


async def test_an_enclosing_scope_aborts_the_request(socket_autojump_clock: Clock) -> None:
    script = [{"stall": True}, {"text": "after"}]
    async with served("openai", script) as (provider, client):
        with TaskCensus() as census:
            with trio.move_on_after(3) as scope:
                await client.run("hi")
            assert_no_client_tasks(census)
        assert scope.cancelled_caught
        assert await closed_soon(provider, 0)
        assert (await client.run("again")).text == "after"


@pytest.mark.parametrize("style", STYLES)
async def test_a_cancel_during_backoff_ends_the_run_without_retrying(
    style: str, socket_autojump_clock: Clock
) -> None:
    script = [{"status": 503}, {"text": "never"}]
    async with served(style, script, retry_base_ms=10_000) as (provider, client):
        token = CancelToken()
        async with trio.open_nursery() as nursery:

            async def cancel_later() -> None:
                await trio.sleep(5)  # the client is in its 10 s backoff by then
                token.cancel()

            nursery.start_soon(cancel_later)
            started = trio.current_time()
            result = await client.run("hi", None, cancel=token)
        assert result.status == "cancelled"
        assert trio.current_time() - started < 6
        assert len(provider.requests) == 1


async def test_closing_the_stream_early_aborts_the_request(socket_autojump_clock: Clock) -> None:
    script = [{"text": "a b c d e f", "stall_after": 5}, {"text": "next"}]
    async with served("anthropic", script) as (provider, client):
        async with client.stream("hi", None) as events:
            async for event in events:
                if event["type"] == "text":
                    break
        assert await closed_soon(provider, 0)
        assert (await client.run("again")).text == "next"
