"""Issue 38: fallback to other providers and hedged requests, against two real
loopback FakeProviders with faults (hang, 503, slow first byte)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from http_helpers import KEY

from toolnexus_trio import ClientOptions, GenerateError, create_client
from toolnexus_trio.testing import FakeProvider, open_fake_provider


def _opts(provider: FakeProvider, style: str = "openai", **kw: Any) -> ClientOptions:
    kw.setdefault("model", f"model-{provider.port}")
    kw.setdefault("retries", 0)
    return ClientOptions(base_url=provider.base_url, style=style, api_key=KEY, **kw)  # type: ignore[arg-type]


@asynccontextmanager
async def two(
    first: list[Any], second: list[Any], second_style: str = "anthropic", **kw: Any
) -> AsyncIterator[tuple[FakeProvider, FakeProvider, Any, list[dict[str, Any]]]]:
    metrics: list[dict[str, Any]] = []
    async with open_fake_provider(first) as a, open_fake_provider(second) as b:
        options = _opts(
            a, model="first", fallback=[_opts(b, second_style, model="second")],
            on_metric=metrics.append, **kw,
        )  # fmt: skip
        async with create_client(options) as client:
            yield a, b, client, metrics


def _attempts(metrics: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["model"], m["status"]) for m in metrics if m["event"] == "attempt"]


async def test_a_503_moves_on_to_the_next_provider_of_another_style() -> None:
    async with two([{"status": 503}], [{"text": "from b"}]) as (a, b, client, metrics):
        result = await client.run("hi")
        text = client.metrics()
    assert result.text == "from b" and result.status == "done"
    assert a.requests[0].path == "/v1/chat/completions" and b.requests[0].path == "/v1/messages"
    assert b.requests[0].json["model"] == "second"
    assert _attempts(metrics) == [("first", "error"), ("second", "ok")]
    llm = [m for m in metrics if m["event"] == "llm"]
    assert [m["model"] for m in llm] == ["second"]  # the model that answered
    assert 'toolnexus_llm_attempts_total{model="first",status="error"} 1' in text
    assert 'toolnexus_llm_attempts_total{model="second",status="ok"} 1' in text


async def test_429_after_retries_and_connection_errors_move_on() -> None:
    async with two([{"status": 429}, {"status": 429}], [{"text": "b"}], retries=1) as (
        a, _, client, _,
    ):  # fmt: skip
        assert (await client.run("hi")).text == "b"
    assert len(a.requests) == 2  # its own retry first, then the next provider
    async with open_fake_provider([{"text": "b"}]) as b:
        dead = ClientOptions(base_url="http://127.0.0.1:9/v1", style="openai", model="x",
                             retries=0, fallback=[_opts(b)])  # fmt: skip
        async with create_client(dead) as client:
            assert (await client.run("hi")).text == "b"


async def test_other_failures_do_not_move_on_unless_fallback_on_says() -> None:
    async with two([{"status": 400}], [{"text": "b"}]) as (_, b, client, metrics):
        with pytest.raises(GenerateError, match="HTTP 400"):
            await client.run("hi")
    assert not b.requests
    assert _attempts(metrics) == [("first", "error")]
    seen: list[int | None] = []

    def fallback_on(error: GenerateError) -> bool:
        seen.append(error.status)
        return True

    async with two([{"status": 400}], [{"text": "b"}], fallback_on=fallback_on) as (
        _, _, client, _,
    ):  # fmt: skip
        assert (await client.run("hi")).text == "b"
    assert seen == [400]


async def test_the_last_failure_is_raised_when_all_fail() -> None:
    async with two([{"status": 503}], [{"status": 502}]) as (_, _, client, metrics):
        with pytest.raises(GenerateError, match="HTTP 502"):
            await client.run("hi")
    assert _attempts(metrics) == [("first", "error"), ("second", "error")]


async def test_a_stream_that_already_sent_text_does_not_move_on() -> None:
    async with two([{"text": "one two three", "drop_after": 3}], [{"text": "b"}]) as (
        _, b, client, _,
    ):  # fmt: skip
        seen: list[dict[str, Any]] = []

        async def consume() -> None:
            async with client.stream("hi") as events:
                async for event in events:
                    seen.append(event)  # noqa: PERF401 (kept as they come: the run fails)

        with pytest.raises(GenerateError, match="broke"):
            await consume()
    assert [e["delta"] for e in seen if e["type"] == "text"] == ["one ", "two "]
    assert not b.requests


async def test_a_stream_moves_on_before_any_text_and_announces_attempts() -> None:
    async with (
        two([{"status": 503}], [{"text": "b says"}]) as (_, _, client, _),
        client.stream("hi") as events,
    ):
        seen = [e async for e in events]
    kinds = [e["type"] for e in seen]
    assert kinds[:3] == ["attempt", "text", "text"]
    attempts = [(e["model"], e["status"]) for e in seen if e["type"] == "attempt"]
    assert attempts == [("first", "error"), ("second", "ok")]
    assert seen[-1]["result"].text == "b says"


# -- hedging ------------------------------------------------------------------------


async def test_hedge_starts_the_next_provider_when_the_first_stalls(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    async with two([{"stall": True}], [{"text": "b"}], hedge_after_ms=200) as (
        a, b, client, metrics,
    ):  # fmt: skip
        started = trio.current_time()
        result = await client.run("hi")
        took = trio.current_time() - started
        # The loser's server sees its client hang up: the request was cancelled and its
        # connection closed as soon as the winner's answer began.
        with trio.fail_after(5):
            await a.requests[0].closed.wait()
    assert result.text == "b"
    assert b.requests[0].received_at - a.requests[0].received_at == pytest.approx(0.2, abs=0.06)
    assert took < 0.3
    assert a.requests[0].closed_at is not None
    assert sorted(_attempts(metrics)) == [("first", "cancelled"), ("second", "ok")]


async def test_hedge_takes_whichever_answers_first(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    # The first is slow to its first byte (1 s); the second, started at 100 ms, answers
    # after 300 ms more: it wins, and the first is closed before it answers.
    async with two([{"delay_ms": 1000, "text": "a"}], [{"delay_ms": 300, "text": "b"}],
                   hedge_after_ms=100) as (a, _, client, _):  # fmt: skip
        result = await client.run("hi")
        with trio.fail_after(5):
            await a.requests[0].closed.wait()
    assert result.text == "b"
    # And when the first answers within the delay, the second is never asked.
    async with two([{"delay_ms": 50, "text": "a"}], [{"text": "b"}], hedge_after_ms=100) as (
        _, b, client, metrics,
    ):  # fmt: skip
        assert (await client.run("hi")).text == "a"
    assert not b.requests and _attempts(metrics) == [("first", "ok")]


async def test_hedge_moves_on_at_once_after_a_failure(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    async with two([{"status": 503}], [{"text": "b"}], hedge_after_ms=10_000) as (
        a, b, client, _,
    ):  # fmt: skip
        result = await client.run("hi")
    assert result.text == "b"
    assert b.requests[0].received_at - a.requests[0].received_at < 1


async def test_hedged_stream_sends_only_the_winners_text(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    async with two([{"stall": True}], [{"text": "only b"}], hedge_after_ms=100) as (
        a, _, client, _,
    ):  # fmt: skip
        async with client.stream("hi") as events:
            seen = [e async for e in events]
        with trio.fail_after(5):
            await a.requests[0].closed.wait()
    assert "".join(e["delta"] for e in seen if e["type"] == "text") == "only b"
    assert {e["status"] for e in seen if e["type"] == "attempt"} == {"cancelled", "ok"}


async def test_a_run_cancelled_mid_hedge_closes_every_attempt(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    async with two([{"stall": True}], [{"stall": True}], hedge_after_ms=100) as (
        a, b, client, _,
    ):  # fmt: skip
        with trio.move_on_after(1):
            await client.run("hi")
        with trio.fail_after(5):
            await a.requests[0].closed.wait()
            await b.requests[0].closed.wait()


@asynccontextmanager
async def three(
    steps: tuple[list[Any], list[Any], list[Any]], **kw: Any
) -> AsyncIterator[tuple[list[FakeProvider], Any, list[dict[str, Any]]]]:
    metrics: list[dict[str, Any]] = []
    async with (
        open_fake_provider(steps[0]) as a,
        open_fake_provider(steps[1]) as b,
        open_fake_provider(steps[2]) as c,
    ):
        options = _opts(a, model="first", fallback=[_opts(b, model="second"),
                        _opts(c, "gemini", model="third")], on_metric=metrics.append, **kw)  # fmt: skip
        async with create_client(options) as client:
            yield [a, b, c], client, metrics


async def test_hedge_chains_each_delay_from_the_attempt_before(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    async with three(([{"stall": True}], [{"stall": True}], [{"text": "c"}]),
                     hedge_after_ms=100) as (providers, client, metrics):  # fmt: skip
        assert (await client.run("hi")).text == "c"
        with trio.fail_after(5):
            for p in providers[:2]:
                await p.requests[0].closed.wait()
    a, b, c = (p.requests[0].received_at for p in providers)
    assert b - a == pytest.approx(0.1, abs=0.04) and c - b == pytest.approx(0.1, abs=0.04)
    assert sorted(_attempts(metrics)) == [
        ("first", "cancelled"), ("second", "cancelled"), ("third", "ok"),
    ]  # fmt: skip


async def test_hedge_failure_that_does_not_move_on_starts_no_more(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    # The second fails for good (400) while the first is still on its way: the third
    # never starts, and the first's answer, when it comes, is the turn's.
    async with three(([{"delay_ms": 300, "text": "a"}], [{"status": 400}], [{"text": "c"}]),
                     hedge_after_ms=100) as (providers, client, metrics):  # fmt: skip
        assert (await client.run("hi")).text == "a"
    assert not providers[2].requests
    assert _attempts(metrics) == [("second", "error"), ("first", "ok")]
    # A failure that moves on (503) starts the next at once, not at its delay.
    async with three(([{"stall": True}], [{"status": 503}], [{"text": "c"}]),
                     hedge_after_ms=100) as (providers, client, _):  # fmt: skip
        assert (await client.run("hi")).text == "c"
    b, c = (p.requests[0].received_at for p in providers[1:])
    assert c - b < 0.05


async def test_a_fallback_body_transform_runs_only_for_a_call_made(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []

    def transform(body: dict[str, Any]) -> None:
        seen.append(body["model"])

    async with (
        open_fake_provider([{"delay_ms": 90, "text": "a"}, {"stall": True}]) as a,
        open_fake_provider([{"text": "b"}]) as b,
    ):
        options = _opts(a, model="first", hedge_after_ms=100,
                        fallback=[_opts(b, model="second", body_transform=transform)])  # fmt: skip
        async with create_client(options) as client:
            assert (await client.run("hi")).text == "a"  # answered within the delay
            assert seen == []
            assert (await client.run("hi")).text == "b"  # the hedge fired
    assert seen == ["second"]


def test_bad_fallback_options_are_refused() -> None:
    base = ClientOptions(base_url="http://127.0.0.1:1/v1", style="openai", model="m")
    with pytest.raises(ValueError, match="hedge_after_ms needs fallback"):
        create_client(ClientOptions(base_url=base.base_url, style="openai", model="m",
                                    hedge_after_ms=10))  # fmt: skip
    nested = ClientOptions(base_url=base.base_url, style="openai", model="n", fallback=[base])
    with pytest.raises(ValueError, match="fallback of its own"):
        create_client(ClientOptions(base_url=base.base_url, style="openai", model="m",
                                    fallback=[nested]))  # fmt: skip
    with pytest.raises(ValueError, match="hedge_after_ms must be"):
        create_client(ClientOptions(base_url=base.base_url, style="openai", model="m",
                                    fallback=[base], hedge_after_ms=-1))  # fmt: skip
