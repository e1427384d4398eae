"""Issue 38: Anthropic prompt caching, cache tokens in usage and metrics, and cost."""

from __future__ import annotations

import json
from typing import Any

import pytest
from http_helpers import KEY, adder, calls_step, options, served

from toolnexus_trio import (
    Answer,
    BuiltinsConfig,
    ClientOptions,
    Request,
    RunResult,
    Tool,
    ToolContext,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_client,
    create_toolkit,
    empty_schema,
    pending,
)
from toolnexus_trio.testing import open_fake_provider

EPHEMERAL = {"type": "ephemeral"}
CACHED_USAGE = {"prompt_tokens": 1000, "completion_tokens": 100, "cache_read_tokens": 600,
                "cache_write_tokens": 300}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_prompt_cache_breakpoints(stream: bool) -> None:
    script = [calls_step((1, 2)), {"text": "3"}]
    async with served("anthropic", script, system_prompt="Be brief.", prompt_cache=True) as (
        provider,
        client,
    ):
        toolkit = await adder()
        if stream:
            async with client.stream("sum", toolkit) as events:
                result = [e async for e in events][-1]["result"]
        else:
            result = await client.run("sum", toolkit)
    first, second = (r.json for r in provider.requests)
    assert first["system"] == [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    assert first["tools"][-1]["cache_control"] == EPHEMERAL
    assert first["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "sum", "cache_control": EPHEMERAL}]}
    ]
    # The second call marks the prefix the first one wrote (the user turn) and its own end.
    user, assistant, results = second["messages"]
    assert user["content"][-1]["cache_control"] == EPHEMERAL
    assert all("cache_control" not in b for b in assistant["content"])
    assert results["content"][-1]["cache_control"] == EPHEMERAL
    assert sum(json.dumps(m).count("cache_control") for m in second["messages"]) == 2
    # The transcript itself never carries the breakpoints.
    assert "cache_control" not in json.dumps(result.messages)


async def test_no_breakpoints_without_prompt_cache() -> None:
    async with served("anthropic", [{"text": "ok"}], system_prompt="S") as (provider, client):
        await client.run("hi", await adder())
    assert "cache_control" not in provider.requests[0].body.decode()


@pytest.mark.parametrize("style", ["anthropic", "responses", "openai", "gemini"])
async def test_cache_tokens_reach_usage_and_metrics(style: str) -> None:
    metrics: list[dict[str, Any]] = []
    script = [{"text": "ok", "usage": CACHED_USAGE}]
    async with served(style, script, on_metric=metrics.append) as (_, client):
        result = await client.run("hi")
        text = client.metrics()
    expected = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100,
                "cache_read_tokens": 600, "cache_write_tokens": 300}  # fmt: skip
    if style in ("openai", "gemini"):  # these wires report cache reads only
        del expected["cache_write_tokens"]
    assert result.usage == expected
    llm = next(m for m in metrics if m["event"] == "llm")
    assert llm["cache_read_tokens"] == 600
    assert 'toolnexus_llm_tokens_total{type="cache_read"} 600' in text


async def test_cost_from_prices() -> None:
    prices = {"m": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}}
    metrics: list[dict[str, Any]] = []
    script = [calls_step((1, 2)) | {"usage": CACHED_USAGE}, {"text": "3"}]
    async with served("anthropic", script, prices=prices, on_metric=metrics.append) as (
        _,
        client,
    ):
        result = await client.run("sum", await adder())
        text = client.metrics()
    first = (100 * 3.0 + 600 * 0.3 + 300 * 3.75 + 100 * 15.0) / 1e6
    second = (10 * 3.0 + 5 * 15.0) / 1e6
    assert result.cost == pytest.approx(first + second)
    llm = [m["cost"] for m in metrics if m["event"] == "llm"]
    assert llm == [pytest.approx(first), pytest.approx(second)]
    run = next(m for m in metrics if m["event"] == "run")
    assert run["cost"] == pytest.approx(first + second)
    assert 'toolnexus_llm_cost_total{model="m"}' in text


async def test_a_run_resumed_from_its_json_keeps_its_cost() -> None:
    """A priced run that pauses, saved as JSON and answered by a fresh client, costs
    both of its model calls (the document keeps the first one's cost)."""

    async def deploy(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if ctx.answer is None:
            return pending(Request(id="req-1", kind="approval", prompt="Deploy?"))
        return ToolResult.ok("deployed")

    toolkit = await create_toolkit(ToolkitOptions(
        extra_tools=[Tool("deploy", "", empty_schema(), ToolSource.CUSTOM, deploy)],
        builtins=BuiltinsConfig.off(),
    ))  # fmt: skip
    prices = {"m": {"input": 1.0, "output": 2.0}}
    script = [
        {"tool_calls": [{"name": "deploy", "arguments": {}}],
         "usage": {"prompt_tokens": 100, "completion_tokens": 10}},
        {"text": "done", "usage": {"prompt_tokens": 200, "completion_tokens": 20}},
    ]  # fmt: skip
    async with served("openai", script, prices=prices) as (provider, client):
        halted = await client.run("ship it", toolkit)
        assert halted.status == "pending"
        first = (100 * 1.0 + 10 * 2.0) / 1e6
        assert halted.cost == pytest.approx(first)
        saved = json.dumps(halted.to_json())
        async with create_client(options(provider, "openai", prices=prices)) as fresh:
            done = await fresh.resume(
                RunResult.from_json(json.loads(saved)), [Answer("req-1", True)], toolkit=toolkit
            )
    assert (done.status, done.text) == ("done", "done")
    assert done.cost == pytest.approx(first + (200 * 1.0 + 20 * 2.0) / 1e6)


async def test_unknown_models_cost_none_never_a_guess() -> None:
    async with served("openai", [{"text": "a"}], prices={"other": {"input": 1, "output": 1}}) as (
        _,
        client,
    ):
        assert (await client.run("hi")).cost is None
    async with served("openai", [{"text": "a"}]) as (_, client):
        assert (await client.run("hi")).cost is None  # no prices at all


async def test_a_fallback_is_priced_as_the_model_that_answered() -> None:
    prices = {"cheap": {"input": 1.0, "output": 2.0}}
    async with open_fake_provider([{"status": 503}]) as a, open_fake_provider([{"text": "b"}]) as b:
        other = ClientOptions(base_url=b.base_url, style="gemini", model="cheap", api_key=KEY)
        options = ClientOptions(base_url=a.base_url, style="openai", model="pricey", api_key=KEY,
                                retries=0, fallback=[other], prices=prices)  # fmt: skip
        async with create_client(options) as client:
            result = await client.run("hi")
    assert result.cost == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)


@pytest.mark.parametrize(
    "prices",
    [{"m": {"input": -1, "output": 1}}, {"m": {"input": 1}}, {"m": {"input": 1, "output": 1,
     "sale": 1}}, {"m": {"input": True, "output": 1}}, ["m"]],
)  # fmt: skip
def test_bad_prices_are_refused(prices: Any) -> None:
    with pytest.raises(ValueError, match="prices"):
        create_client(ClientOptions(base_url="http://127.0.0.1:1/v1", style="openai", model="m",
                                    prices=prices))  # fmt: skip
